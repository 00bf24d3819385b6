"""Which JMQ4 requests waited too long to be acted on, judged by their header sendTime.

A request sent more than the request timeout ago is refused (code 22): its client has given
up on it, and a broker resumed from a pause must not act on what waited in its socket.
Comparing sendTime with our clock directly also refused every request of a client whose
clock runs behind ours by more than the timeout — it could not even log in. So each
connection learns its own baseline: the smallest delay (our arrival time − sendTime) its
recent requests showed, which is transit time plus the clock difference. A request is
stale when its delay exceeds that baseline by more than the timeout. The first request of
a connection sets the baseline and is never stale; the baseline is the minimum over the
last one or two windows of :data:`WINDOW_MS`, so a client whose clock is stepped back
recovers within two windows instead of never.
"""

from __future__ import annotations

import time

WINDOW_MS = 30_000


class SendTimeBaseline:
    """The smallest recent delay of one connection's requests (see the module text)."""

    __slots__ = ("_current", "_previous", "_window_start")

    def __init__(self) -> None:
        self._previous: int | None = None
        self._current: int | None = None
        self._window_start = 0

    def stale(self, send_time: int, timeout_ms: int, now_ms: int | None = None) -> bool:
        """Whether a request stamped ``send_time`` waited more than ``timeout_ms`` beyond
        this connection's baseline; it joins the baseline either way. Never when the check
        is off (``timeout_ms`` ≤ 0) or the request carries no send time (≤ 0)."""
        if timeout_ms <= 0 or send_time <= 0:
            return False
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        delay = now - send_time
        if self._current is None or now - self._window_start > WINDOW_MS:
            self._previous, self._current, self._window_start = self._current, delay, now
        elif delay < self._current:
            self._current = delay
        baseline = self._current if self._previous is None else min(self._previous, self._current)
        return delay - baseline > timeout_ms
