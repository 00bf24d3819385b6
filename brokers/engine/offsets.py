"""Consumer offsets: set the ack index, report progress, pin a start position, and the
registry of broadcast clients.

A reset sets ``ack`` and the shared delivery cursor ``cur``, drops out-of-order acks, the
group's in-flight and due ranges (:mod:`.groups`) and the locked range (``ls``/``lend``)
but keeps the lock itself, so a batch acknowledged afterwards under an older HTTP-MQ
requestId gets "committedOffset not equal" and a JMQ4 ack beyond the new ack index is
ignored: a reset always takes effect at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from brokers.engine.keys import GroupKeys, PartitionKeys
from brokers.engine.model import PartitionProgress
from brokers.engine.redisio import AnyRedis, Script, run_pipelined

SET_ACK = Script(
    """
-- KEYS: state, oo, meta, rs, rd, rh. ARGV: index | 'earliest' | 'latest', only_if_missing,
-- with_previous. Returns the new ack index; with with_previous '1', {new, previous or ''}.
local before = redis.call('HGET', KEYS[1], 'ack')
if ARGV[2] == '1' and before then
  return before
end
local m = redis.call('HMGET', KEYS[3], 'min', 'next')
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local idx
if ARGV[1] == 'earliest' then idx = mn elseif ARGV[1] == 'latest' then idx = nxt
else idx = tonumber(ARGV[1]) end
if idx < mn then idx = mn end
if idx > nxt then idx = nxt end
redis.call('HSET', KEYS[1], 'ack', s(idx), 'cur', s(idx))
redis.call('HDEL', KEYS[1], 'ls', 'lend', 'sh')
redis.call('DEL', KEYS[2], KEYS[4], KEYS[5], KEYS[6])
if ARGV[3] == '1' then return {s(idx), before or ''} end
return s(idx)
"""
)


def _set_ack_keys(topic: str, partition: int, cid: str) -> tuple[str, ...]:
    keys = PartitionKeys(topic, partition)
    return (
        keys.state(cid),
        keys.acked(cid),
        keys.meta,
        keys.range_starts(cid),
        keys.range_due(cid),
        keys.ranges(cid),
    )


async def set_ack(
    client: AnyRedis,
    topic: str,
    partition: int,
    cid: str,
    position: int | str,
    *,
    only_if_missing: bool = False,
) -> int:
    """Set the ack index to an index (clamped to [min, max]), 'earliest' or 'latest'."""
    result = await SET_ACK(
        client,
        _set_ack_keys(topic, partition, cid),
        (position, 1 if only_if_missing else 0, 0),
    )
    return int(result)


async def set_acks(
    client: AnyRedis,
    pins: Sequence[tuple[str, int, str, int | str]],
    *,
    only_if_missing: bool = False,
) -> list[int]:
    """:func:`set_ack` for many ``(topic, partition, cid, position)`` at once, in one
    pipelined round trip; the resulting ack indexes in order."""
    flag = 1 if only_if_missing else 0
    calls = [
        (_set_ack_keys(topic, partition, cid), (position, flag, 0))
        for topic, partition, cid, position in pins
    ]
    return [int(r) for r in await run_pipelined(client, SET_ACK, calls)]


async def move_acks(
    client: AnyRedis, pins: Sequence[tuple[str, int, str, int | str]]
) -> list[tuple[int, int | None]]:
    """:func:`set_acks`, also answering each ack index it replaced (None: there was
    none), in one pipelined round trip: ``(new, previous)`` in order."""
    calls = [
        (_set_ack_keys(topic, partition, cid), (position, 0, 1))
        for topic, partition, cid, position in pins
    ]
    return [
        (int(new), int(before) if before not in (b"", "") else None)
        for new, before in await run_pipelined(client, SET_ACK, calls)
    ]


async def set_acks_if_missing(
    client: AnyRedis, pins: Sequence[tuple[str, int, str, int | str]]
) -> list[int]:
    """:func:`set_acks` with ``only_if_missing``."""
    return await set_acks(client, pins, only_if_missing=True)


async def progress(
    client: AnyRedis, topic: str, partitions: Sequence[int], cid: str, now_ms: int
) -> list[PartitionProgress]:
    """Min, max, ack index, lag, lock and last access of each partition."""
    (rows,) = await progress_many(client, [(topic, partitions, cid)], now_ms)
    return rows


async def progress_many(
    client: AnyRedis, readers: Sequence[tuple[str, Sequence[int], str]], now_ms: int
) -> list[list[PartitionProgress]]:
    """:func:`progress` of many readers ``(topic, partitions, consumer id)``, in order,
    in one round trip."""
    pipe = client.pipeline(transaction=False)
    for topic, partitions, cid in readers:
        for p in partitions:
            keys = PartitionKeys(topic, p)
            pipe.hmget(keys.meta, "min", "next")
            pipe.hgetall(keys.state(cid))
            pipe.zrange(keys.acked(cid), 0, -1)
    raw = await pipe.execute() if readers else []
    out: list[list[PartitionProgress]] = []
    at = 0
    for topic, partitions, _ in readers:
        rows = []
        for p in partitions:
            rows.append(_progress_row(topic, p, raw[at], raw[at + 1], raw[at + 2], now_ms))
            at += 3
        out.append(rows)
    return out


def _progress_row(
    topic: str, p: int, bounds: list, state: dict, acked: list, now_ms: int
) -> PartitionProgress:
    lo, hi = bounds
    mn, mx = int(lo or 0), int(hi or 0)
    st = {k.decode(): v.decode() for k, v in state.items()}
    ack = int(st["ack"]) if "ack" in st else -1
    expires = int(st.get("le", 0))
    locked = expires > now_ms
    pending = 0
    for member in acked:
        a, b = member.decode().split(":")
        pending += int(b) - int(a)
    return PartitionProgress(
        topic=topic,
        partition=p,
        min_index=mn,
        max_index=mx,
        ack_index=ack,
        lag=mx - max(ack, mn) if ack >= 0 else mx - mn,
        lock_owner=st.get("lo", "") if locked else "",
        lock_token=int(st.get("lt", 0)) if locked else 0,
        lock_expires_ms=expires if locked else 0,
        last_access_ms=int(st.get("t", 0)),
        last_address=st.get("ip", ""),
        pending_acks=pending,
    )


async def ack_index(client: AnyRedis, topic: str, partition: int, cid: str) -> int:
    """The ack index of consumer ``cid`` on ``partition`` (the partition's min if none)."""
    keys = PartitionKeys(topic, partition)
    ack, lo = await client.hget(keys.state(cid), "ack"), await client.hget(keys.meta, "min")
    return int(ack) if ack is not None else int(lo or 0)


async def seen_client(client: AnyRedis, topic: str, app: str, client_id: str, now_ms: int) -> None:
    """Record that broadcast client ``client_id`` of ``app`` consumed ``topic`` now."""
    await client.zadd(GroupKeys(topic, app).clients, {client_id: now_ms})


async def clients(client: AnyRedis, topic: str, app: str, since_ms: int | None) -> list[str]:
    """Broadcast clientIds of ``app`` on ``topic`` seen since ``since_ms`` (None: all)."""
    low = "-inf" if since_ms is None else since_ms
    key = GroupKeys(topic, app).clients
    return [c.decode() for c in await client.zrangebyscore(key, low, "+inf")]


async def lag_clients(
    client: AnyRedis, groups: Sequence[tuple[str, str]], since_ms: int
) -> list[list[str]]:
    """For each broadcast consumer ``(topic, app)``, in order, the clients whose progress
    its lag is measured by: those seen since ``since_ms`` (a client that went away for
    good would otherwise lag for ever), or every registered one when none was (the whole
    consumer is down: what its clients left behind is its backlog). One round trip
    whatever the number of groups."""
    if not groups:
        return []
    pipe = client.pipeline(transaction=False)
    for topic, app in groups:
        pipe.zrange(GroupKeys(topic, app).clients, 0, -1, withscores=True)
    out: list[list[str]] = []
    for entries in await pipe.execute():
        recent = [c.decode() for c, seen in entries if seen >= since_ms]
        out.append(recent or [c.decode() for c, _ in entries])
    return out


UNREGISTER_IDLE = Script(
    """
-- KEYS[1]: a broadcast consumer's client registry. ARGV: client, last-seen pairs: each
-- leaves if it was not seen since (one that fetched meanwhile has a new score and
-- stays). Returns the clients that left.
local gone = {}
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    gone[#gone + 1] = ARGV[i]
  end
end
return gone
"""
)


async def idle_clients(
    client: AnyRedis, groups: Sequence[tuple[str, str]], before_ms: int, limit: int
) -> list[list[tuple[str, float]]]:
    """For each broadcast consumer ``(topic, app)``, in order, up to ``limit`` of its
    clients last seen before ``before_ms``, with when: one round trip for all."""
    if not groups:
        return []
    pipe = client.pipeline(transaction=False)
    for topic, app in groups:
        key = GroupKeys(topic, app).clients
        pipe.zrangebyscore(key, "-inf", f"({before_ms}", start=0, num=limit, withscores=True)
    return [[(c.decode(), seen) for c, seen in found] for found in await pipe.execute()]


async def unregister_idle(
    client: AnyRedis, topic: str, app: str, idle: Sequence[tuple[str, float]]
) -> list[str]:
    """Take the ``idle`` clients (client, last seen) off ``app``'s registry on ``topic``,
    each unless it was seen again since; the clients taken off."""
    args: list[str | float] = [v for pair in idle for v in pair]
    gone = await UNREGISTER_IDLE(client, (GroupKeys(topic, app).clients,), args)
    return [c.decode() if isinstance(c, bytes) else str(c) for c in gone]
