"""Start and stop PostgreSQL and Redis for local runs and test sessions.

``make run`` keeps its servers under ``.run/`` (data survives a restart); the test
launcher starts throw-away servers on free loopback ports. Both use these helpers,
which only need the Debian ``postgresql`` and ``redis-server`` packages (installed by
``scripts/bootstrap.sh``). PostgreSQL refuses to run as root, so as root the server is
run as the ``postgres`` system user.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The first port of the kernel's range for automatically bound sockets."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now and that this process has not
    handed out before (callers asking for several ports before binding any need distinct
    ones).

    The port lies below the kernel's ephemeral range: a server started seconds later (a
    ``make run`` under test starts its brokers after PostgreSQL, migrations and Spark) must
    not find its port taken by one of the hundreds of client connections opened meanwhile,
    each of which gets a random port of that range (seen: a broker that could never bind).
    """
    low = _ephemeral_low()
    below = low > 11024  # else an unusual range: take what the kernel offers
    while True:
        port = random.randrange(low - 10000, low) if below else 0
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def wait_for_port(port: int, timeout: float = 30.0, host: str = "127.0.0.1") -> None:
    """Block until something accepts TCP connections on ``host:port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not candidates:
        raise FileNotFoundError(f"PostgreSQL's {name} is not installed (run scripts/bootstrap.sh)")
    return candidates[-1]


def _as_postgres_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


def _chown_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(path, entry.pw_uid, entry.pw_gid)


def postgres_reachable_dir(datadir: Path) -> Path:
    """Where the ``postgres`` user can keep ``datadir`` when we run as root.

    A directory below a private parent (root's home, pytest's temp root) cannot be reached
    by ``postgres``; such a cluster lives under /var/lib/mqcloud instead, named after the
    requested path so that the next run finds the same data.
    """
    datadir = datadir.resolve()
    if os.geteuid() != 0:
        return datadir
    probe = datadir.parent
    while not probe.exists():
        probe = probe.parent
    reachable = (
        subprocess.run(
            ["runuser", "-u", "postgres", "--", "test", "-x", str(probe)], check=False
        ).returncode
        == 0
    )
    if reachable:
        return datadir
    digest = hashlib.sha1(str(datadir).encode()).hexdigest()[:12]
    return Path("/var/lib/mqcloud") / f"pg-{digest}" / datadir.name


@dataclass
class PostgresServer:
    """A PostgreSQL cluster in ``datadir`` serving ``port`` on 127.0.0.1."""

    datadir: Path
    port: int
    user: str = "mqcloud"
    password: str = "mqcloud"
    database: str = "mqcloud"

    def __post_init__(self) -> None:
        self.datadir = postgres_reachable_dir(self.datadir)

    @property
    def url(self) -> str:
        return f"postgres://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def start(self) -> None:
        """Initialise the cluster if needed, start it, and create the role and database."""
        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # the postgres user must be able to reach its files
            self.datadir.parent.chmod(0o755)
        sockdir = self.datadir.parent / "pg-socket"
        sockdir.mkdir(exist_ok=True)
        _chown_postgres(sockdir)
        fresh = not (self.datadir / "PG_VERSION").exists()
        if fresh:
            self.datadir.mkdir(parents=True, exist_ok=True)
            _chown_postgres(self.datadir)
            pwfile = self.datadir.parent / "pg-password"
            pwfile.write_text(self.password)
            _chown_postgres(pwfile)
            subprocess.run(
                [
                    *_as_postgres_user(),
                    _pg_bin("initdb"),
                    "-D",
                    str(self.datadir),
                    "-U",
                    self.user,
                    f"--pwfile={pwfile}",
                    "-A",
                    "scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            pwfile.unlink()
        log = self.datadir.parent / "postgres.log"
        log.touch()
        _chown_postgres(log)
        subprocess.run(
            [
                *_as_postgres_user(),
                _pg_bin("pg_ctl"),
                "-D",
                str(self.datadir),
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={sockdir}"
                " -c fsync=on -c max_connections=200",
                "start",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_port(self.port)
        if fresh:
            env = {**os.environ, "PGPASSWORD": self.password}
            subprocess.run(
                [
                    _pg_bin("psql"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    self.user,
                    "-d",
                    "postgres",
                    "-q",
                    "-c",
                    f"CREATE DATABASE {self.database}",
                ],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
            )

    def stop(self) -> None:
        """Stop the server (fast shutdown: clients are disconnected, data is kept)."""
        if (self.datadir / "postmaster.pid").exists():
            subprocess.run(
                [
                    *_as_postgres_user(),
                    _pg_bin("pg_ctl"),
                    "-D",
                    str(self.datadir),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ],
                check=False,
                stdout=subprocess.DEVNULL,
            )


@dataclass
class RedisServer:
    """A redis-server in ``datadir`` on 127.0.0.1:``port`` with AOF on."""

    datadir: Path
    port: int
    appendfsync: str = "everysec"
    extra_args: tuple[str, ...] = ()  # later directives override the defaults above
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start redis-server with AOF persistence and wait until it answers."""
        self.datadir.mkdir(parents=True, exist_ok=True)
        binary = shutil.which("redis-server")
        if not binary:
            raise FileNotFoundError("redis-server is not installed (run scripts/bootstrap.sh)")
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.datadir),
                "--appendonly",
                "yes",
                "--appendfsync",
                self.appendfsync,
                "--save",
                "",
                "--daemonize",
                "no",
                "--logfile",
                str(self.datadir / "redis.log"),
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_port(self.port)

    def stop(self) -> None:
        """Stop redis-server (SIGTERM makes it finish the AOF) and wait for it."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def temporary_services(prefix: str) -> Iterator[tuple[PostgresServer, RedisServer]]:
    """A throw-away PostgreSQL and Redis on free loopback ports, in a new temporary
    directory (a test session's, a benchmark's): both stopped and the directory removed
    on exit."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    workdir.chmod(0o755)  # as root, PostgreSQL runs as the postgres user, which must reach it
    postgres = PostgresServer(workdir / "pg", free_port())
    redis = RedisServer(workdir / "redis", free_port())
    try:
        postgres.start()
        redis.start()
        yield postgres, redis
    finally:
        redis.stop()
        postgres.stop()
        shutil.rmtree(workdir, ignore_errors=True)
