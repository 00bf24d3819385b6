"""A Spark standalone master and worker from the installed PySpark, on 127.0.0.1.

For tests and benchmarks (and a one-machine cluster): :class:`StandaloneCluster` starts
``bin/spark-class org.apache.spark.deploy.master.Master`` and ``…worker.Worker`` on free
loopback ports, waits until the worker has registered, and stops both by PID.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pyspark


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandaloneCluster:
    """One master and one worker with ``cores`` cores and ``memory`` of executor memory."""

    def __init__(self, workdir: Path, *, cores: int = 2, memory: str = "1g") -> None:
        self.workdir = Path(workdir)
        self.cores, self.memory = cores, memory
        self.spark_home = Path(pyspark.__file__).resolve().parent
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "SPARK_HOME": str(self.spark_home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_WORKER_DIR": str(self.workdir / "work"),
            "SPARK_LOG_DIR": str(self.workdir / "logs"),
        }
        log = (self.workdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [str(self.spark_home / "bin" / "spark-class"), *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def start(self, timeout_s: float = 60.0) -> StandaloneCluster:
        """Start master then worker; return once the worker is registered and alive."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        self._spawn(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--webui-port", str(self.worker_ui_port),
            "--cores", str(self.cores), "--memory", self.memory, self.url,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"spark process exited early; see {self.workdir}/*.log")
            if self._alive_workers() >= 1:
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"no Spark worker registered within {timeout_s}s; see {self.workdir}")

    def _alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=1) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def stop(self) -> None:
        """Stop the worker, then the master (SIGTERM by PID, SIGKILL after 10 s)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
