"""Counting an engine's leases in a test: how many lease calls a server made from now on."""

from __future__ import annotations

import asyncio
from typing import Any


class LeaseCounter:
    """Wraps ``engine.lease``: ``count`` leases answered since, ``answered`` set by each."""

    def __init__(self, engine: Any) -> None:
        self.count = 0
        self.calls: list[Any] = []
        self.answered = asyncio.Event()
        lease = engine.lease

        async def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                return await lease(*args, **kwargs)
            finally:
                self.count += 1
                self.calls.append(args[:2])
                self.answered.set()

        engine.lease = counted
