"""Connection and frame limits of vibemq.md §14: sliding windows and a connection count."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class SlidingWindow:
    """At most ``limit`` events in any ``window`` seconds."""

    def __init__(
        self, limit: int, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit, self.window, self._clock = limit, window, clock
        self._times: deque[float] = deque()

    def allow(self) -> bool:
        """Record one event if it fits the window; False when it does not."""
        now = self._clock()
        times = self._times
        while times and times[0] <= now - self.window:
            times.popleft()
        if len(times) >= self.limit:
            return False
        times.append(now)
        return True

    @property
    def idle(self) -> bool:
        """No event inside the window (the window can be forgotten)."""
        return not self._times or self._times[-1] <= self._clock() - self.window


class ConnectionGate:
    """Admits connections: concurrent maximum and new connections per IP (sliding 60 s)."""

    def __init__(self, max_connections: int, per_ip: int | None) -> None:
        self.max_connections, self.per_ip = max_connections, per_ip
        self.active = 0
        self.accepted = 0
        self.rejected = 0
        self._per_ip: dict[str, SlidingWindow] = {}

    def admit(self, ip: str) -> str | None:
        """None if the connection may proceed; ``"silent"`` (close at once) for the per-IP
        limit, ``"limit"`` (CONNECTION_LIMIT, then close) for the concurrent maximum."""
        if self.per_ip is not None:
            if len(self._per_ip) > 10_000:
                self._per_ip = {k: w for k, w in self._per_ip.items() if not w.idle}
            window = self._per_ip.setdefault(ip, SlidingWindow(self.per_ip, 60.0))
            if not window.allow():
                self.rejected += 1
                return "silent"
        if self.active >= self.max_connections:
            self.rejected += 1
            return "limit"
        self.active += 1
        self.accepted += 1
        return None

    def release(self) -> None:
        """An admitted connection closed."""
        self.active -= 1
