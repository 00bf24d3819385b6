"""Protocol errors of broken or hostile clients: every one counted, a sample logged.

A client sending garbage must neither fill the disk nor slow the broker with log lines.
Each broker process counts its protocol errors by protocol and kind (the broker's report
carries the counts to the console's ``/metrics``) and logs at most :data:`BURST` of them per
protocol in each :data:`WINDOW`; the first line logged after a window in which lines were
left out says how many.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

BURST = 20  # lines per protocol and window
WINDOW = 60.0  # seconds


@dataclass
class _Window:
    started: float
    logged: int = 0
    left_out: int = 0


class ProtocolErrors:
    """Counts protocol errors and logs a bounded sample of them."""

    def __init__(
        self,
        *,
        burst: int = BURST,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.window, self._clock = burst, window, clock
        self.counts: Counter[tuple[str, str]] = Counter()
        self._windows: dict[str, _Window] = {}

    def record(
        self, logger: logging.Logger, protocol: str, kind: str, message: str, *args: object
    ) -> None:
        """Count one ``kind`` error of ``protocol``; log ``message % args`` if the window
        still has room."""
        self.counts[(protocol, kind)] += 1
        now = self._clock()
        win = self._windows.get(protocol)
        if win is None or now - win.started >= self.window:
            if win is not None and win.left_out:
                logger.warning(
                    "%s: %d more protocol errors were not logged (%d logged per %.0f s)",
                    protocol,
                    win.left_out,
                    self.burst,
                    self.window,
                )
            win = self._windows[protocol] = _Window(now)
        if win.logged < self.burst:
            win.logged += 1
            logger.info(message, *args)
        else:
            win.left_out += 1

    def snapshot(self) -> dict[str, dict[str, int]]:
        """The counts so far: ``{protocol: {kind: count}}``."""
        out: dict[str, dict[str, int]] = {}
        for (protocol, kind), count in sorted(self.counts.items()):
            out.setdefault(protocol, {})[kind] = count
        return out


protocol_errors = ProtocolErrors()
"""This process's counter, shared by its protocol servers."""
