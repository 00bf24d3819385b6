"""Operator resends (HTTP-MQ §11): a per-consumer list of messages to hand out once.

``retryMsgId`` adds ``partition:index`` to the consumer group's list (per clientId for
broadcast). The next fetch pops entries atomically (LPOP with a count), so each is
returned exactly once cluster-wide, and survives restarts (what a fetch pops past its
byte cap goes back to the head of the list). Resends are outside the ack/lock protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from brokers.engine.errors import IndexOutOfRange
from brokers.engine.keys import GroupKeys
from brokers.engine.model import Delivery
from brokers.engine.read import PULL_READ_BYTES, read_range
from brokers.engine.redisio import AnyRedis, command


async def add(
    client: AnyRedis,
    topic: str,
    app: str,
    entries: Sequence[tuple[int, int]],
    client_ids: Sequence[str | None],
) -> int:
    """Queue (partition, index) pairs for each client id (None = the clustering group)."""
    if not entries:
        return 0
    members = [f"{p}:{i}" for p, i in entries]
    for cid in client_ids:
        await client.rpush(GroupKeys(topic, app).resend(cid), *members)
    return len(members) * len(client_ids)


async def take(
    client: AnyRedis, topic: str, app: str, client_id: str | None, limit: int
) -> list[Delivery]:
    """Pop up to ``limit`` queued resends and read their records (trimmed ones are skipped).
    Asked on every HTTP-MQ fetch, so the pop is a coalesced command, not a redis-py call."""
    key = list_key(topic, app, client_id)
    raw = await command(client, "LPOP", key, limit)
    return await read_popped(client, topic, raw or (), key)


def list_key(topic: str, app: str, client_id: str | None) -> str:
    """The resend list of a consumer group (of one of its clients, for broadcast)."""
    return GroupKeys(topic, app).resend(client_id)


READ_TOGETHER = 8
"""Popped entries whose records are read at once (their reads leave in one pipelined
write): a fetch handing out its 32 resends waits 4 round trips, not 32, and holds the
records of at most this many beyond its byte cap."""


async def read_popped(
    client: AnyRedis, topic: str, members: Sequence[bytes], key: str
) -> list[Delivery]:
    """The records of ``partition:index`` entries popped from list ``key`` (trimmed ones
    are skipped), up to :data:`PULL_READ_BYTES` of them (at least one): the entries past
    that go back to the head of the list, in their order, for the next fetch. Read
    :data:`READ_TOGETHER` at a time."""
    out: list[Delivery] = []
    size = 0
    for first in range(0, len(members), READ_TOGETHER):
        window = members[first : first + READ_TOGETHER]
        found = await asyncio.gather(*(_read_entry(client, topic, m) for m in window))
        for n, got in enumerate(found, first):
            if not got:  # trimmed by retention since it was queued
                continue
            more = sum(len(d.record) for d in got)
            if out and size + more > PULL_READ_BYTES:
                await client.lpush(key, *reversed(members[n:]))
                return out
            out.extend(got)
            size += more
    return out


async def _read_entry(client: AnyRedis, topic: str, member: bytes) -> list[Delivery]:
    """The record holding the ``partition:index`` of ``member``; empty when trimmed."""
    p, i = (int(x) for x in member.decode().split(":"))
    try:
        found = await read_range(client, topic, p, i, 1)
    except IndexOutOfRange:
        return []
    return [d for d in found if d.index <= i < d.end]
