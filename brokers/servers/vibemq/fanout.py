"""Fan-out across processes: the process that takes a FanOut message from the queue
publishes it on the queue's fan channel, and every process hands a copy to each of its
local subscribers of that queue (vibemq.md §9.1: every subscriber present at dispatch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import msgspec

from brokers.engine import AnyRedis, Delivery, cancel_and_wait

log = logging.getLogger("mqcloud.vibemq")
_PREFIX = "mq:vmq:fan:"
_SENTINEL = "mq:vmq:fan"


def fan_channel(queue: str) -> str:
    """The pub/sub channel of ``queue``'s fan-out copies."""
    return _PREFIX + queue


def encode_copy(delivery: Delivery) -> bytes:
    """A taken message as published on the fan channel."""
    return msgspec.msgpack.encode((delivery.partition, delivery.index, delivery.record))


class FanoutListener:
    """Receives fan-out copies for the queues this process has subscribers of."""

    def __init__(self, redis: AnyRedis, on_copy: Callable[[str, Delivery], None]) -> None:
        self._redis = redis
        self._on_copy = on_copy
        self._pubsub = None
        self._task: asyncio.Task[None] | None = None
        self._queues: set[str] = set()

    async def start(self) -> None:
        self._pubsub = self._redis.pubsub()
        await self._pubsub.subscribe(_SENTINEL)
        self._task = asyncio.create_task(self._run(), name="vibemq-fanout")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            self._pubsub = None

    async def follow(self, queue: str) -> None:
        """Receive copies of ``queue`` from now on."""
        if queue not in self._queues and self._pubsub is not None:
            self._queues.add(queue)
            await self._pubsub.subscribe(fan_channel(queue))

    async def unfollow(self, queue: str) -> None:
        if queue in self._queues and self._pubsub is not None:
            self._queues.discard(queue)
            await self._pubsub.unsubscribe(fan_channel(queue))

    async def _run(self) -> None:
        while True:
            try:
                msg = await self._pubsub.get_message(  # type: ignore[union-attr]
                    ignore_subscribe_messages=True, timeout=1.0
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("fan-out connection lost; resubscribing", exc_info=True)
                await asyncio.sleep(0.5)
                with contextlib.suppress(Exception):
                    await self._pubsub.aclose()  # type: ignore[union-attr]
                self._pubsub = self._redis.pubsub()
                with contextlib.suppress(Exception):
                    await self._pubsub.subscribe(_SENTINEL, *map(fan_channel, self._queues))
                continue
            if msg is None or msg.get("type") not in ("message", b"message"):
                continue
            channel = msg["channel"]
            if isinstance(channel, bytes):
                channel = channel.decode()
            try:
                partition, index, record = msgspec.msgpack.decode(msg["data"])
            except msgspec.DecodeError:
                continue
            self._on_copy(channel[len(_PREFIX) :], Delivery(partition, index, 1, record))
