"""Partitions in turn: a produce that asks for "the next partition" gets one by one counter
per topic shared by every process (:func:`~brokers.engine.keys.turn_key`), so producers on
any process spread their messages over the partitions round robin.
"""

from __future__ import annotations

from brokers.engine.keys import turn_key
from brokers.engine.redisio import AnyRedis


async def next_in_turn(redis: AnyRedis, topic: str, partitions: int) -> int:
    """The partition after the one the previous turn of ``topic`` got (0 first)."""
    return (int(await redis.incr(turn_key(topic))) - 1) % partitions
