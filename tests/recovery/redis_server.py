"""A Redis of a test's own that the test may kill and restart (the session's Redis is shared)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.scripts_path import RedisServer, free_port


class OwnRedis:
    """redis-server (AOF everysec) on a free loopback port, data under ``datadir``."""

    def __init__(self, datadir: Path, *, appendfsync: str = "everysec") -> None:
        self.server = RedisServer(datadir, free_port(), appendfsync=appendfsync)
        self.back_at = 0.0  # time.monotonic() when the last restart accepted connections

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def pid(self) -> int:
        assert self.server.process is not None
        return self.server.process.pid

    def start(self) -> None:
        self.server.start()
        self.back_at = time.monotonic()

    def kill(self) -> None:
        """kill -9: no shutdown, no final fsync (an AOF everysec may lose its last second)."""
        proc = self.server.process
        assert proc is not None and proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def outage(self, seconds: float) -> None:
        """Kill Redis, keep it down for ``seconds``, start it again (same port and data)."""
        self.kill()
        time.sleep(seconds)
        self.start()

    def stop(self) -> None:
        self.server.stop()
