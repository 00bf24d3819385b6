"""Run the whole platform locally: PostgreSQL, Redis, web, HTTP-MQ, brokers and Celery.

``make run`` calls this after ``scripts/bootstrap.sh``. When ``DATABASE_URL`` /
``REDIS_URL`` are unset it starts PostgreSQL and Redis (AOF on) under ``MQCLOUD_RUN_DIR``
(default ``.run/``) on loopback, so a second run keeps the data. Then it migrates, loads
the demo data and starts the process set of ``Procfile`` under supervisord
(:mod:`supervisor_conf`), which restarts a process that exits and keeps the others
serving. Ctrl-C (or SIGTERM) stops the process set and then the servers it started.

Django's debug mode stays off (no debug pages, even on this machine) unless the developer
asks for it with ``DEBUG=true``; the banner says which mode runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from localservices import PostgresServer, RedisServer  # noqa: E402
from supervisor_conf import parse_procfile, render  # noqa: E402

VENV_BIN = ROOT / ".venv" / "bin"


def debug_banner(value: str) -> str:
    """What the start banner says of Django's debug mode."""
    if value.strip().lower() in {"1", "true", "yes", "on"}:
        return (
            "DEBUG is ON (DEBUG=true): console errors show Django's debug page with settings"
            " and tracebacks; never expose this process to other machines."
        )
    return "DEBUG is off (set DEBUG=true for Django's debug pages while developing)."


def main() -> int:
    """Start everything, wait for the process set to end, stop what was started."""
    run_dir = Path(os.environ.get("MQCLOUD_RUN_DIR", ROOT / ".run")).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("WEB_PORT", "8000")
    env.setdefault("HTTPMQ_PORT", "8081")
    env["MQCLOUD_RUN_DIR"] = str(run_dir)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env.setdefault("DEBUG", "false")
    env.setdefault("ARCHIVE_URL", str(run_dir / "archive"))
    started: list[PostgresServer | RedisServer] = []
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the terminal as they are written
    supervisord: subprocess.Popen | None = None

    def terminate(signum: int, frame: object) -> None:
        if supervisord and supervisord.poll() is None:
            supervisord.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, terminate)
    try:
        if not env.get("DATABASE_URL"):
            pg = PostgresServer(run_dir / "pg", int(env.get("MQCLOUD_PG_PORT", "5433")))
            if pg.datadir != (run_dir / "pg").resolve():
                print(f"PostgreSQL data: {pg.datadir} (the postgres user cannot reach {run_dir})")
            pg.start()
            started.append(pg)
            env["DATABASE_URL"] = pg.url
        if not env.get("REDIS_URL"):
            fsync = env.get("MQCLOUD_REDIS_APPENDFSYNC", "everysec")
            if fsync not in ("everysec", "always"):
                raise SystemExit(f"MQCLOUD_REDIS_APPENDFSYNC must be everysec or always: {fsync}")
            redis = RedisServer(
                run_dir / "redis", int(env.get("MQCLOUD_REDIS_PORT", "6380")), appendfsync=fsync
            )
            redis.start()
            started.append(redis)
            env["REDIS_URL"] = redis.url
        manage = [str(VENV_BIN / "python"), str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True)
        subprocess.run([*manage, "collectstatic", "--noinput", "-v", "0"], env=env, check=True)
        subprocess.run([*manage, "loaddemo"], env=env, check=True)
        subprocess.run([*manage, "publishcatalog"], env=env, check=True)
        print(
            f"\nmqcloud console: http://127.0.0.1:{env['WEB_PORT']}/  (log in as admin or alice;"
            " passwords were printed above when the users were created, or come from"
            " MQCLOUD_DEMO_ADMIN_PASSWORD / MQCLOUD_DEMO_ALICE_PASSWORD)\n"
            f"REST API: http://127.0.0.1:{env['WEB_PORT']}/api/v1/   docs: /api/docs/\n"
            f"HTTP-MQ: http://127.0.0.1:{env['HTTPMQ_PORT']}/mq/  (manage.py runproxy;"
            " e.g. POST /mq/produce with Authorization: Bearer <demo-app token>)\n"
            f"processes: .venv/bin/supervisorctl -c {run_dir / 'supervisord.conf'} status\n"
            f"{debug_banner(env['DEBUG'])}\n"
            "Ctrl-C stops everything.\n",
            flush=True,
        )
        conf = run_dir / "supervisord.conf"
        conf.touch(mode=0o600)
        conf.chmod(0o600)  # it holds the password of the control socket
        conf.write_text(render(parse_procfile((ROOT / "Procfile").read_text()), run_dir, ROOT))
        supervisord = subprocess.Popen(
            [str(VENV_BIN / "supervisord"), "-c", str(conf)], env=env, cwd=ROOT
        )
        while True:
            try:
                return supervisord.wait()
            except KeyboardInterrupt:
                # From a terminal supervisord got the same SIGINT and is stopping everything;
                # sent to this process alone (kill -INT, a service manager), it did not: ask
                # it too (once more is harmless while it stops) and wait for it.
                terminate(signal.SIGINT, None)
                continue
    finally:
        if supervisord and supervisord.poll() is None:
            supervisord.terminate()
            supervisord.wait()
        for server in reversed(started):
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
