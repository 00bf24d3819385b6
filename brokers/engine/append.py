"""Appending to a partition, choosing the partition, and what each qos guarantees.

One call appends all its records to ONE partition with one Lua script, so the call is
atomic: every record gets the next index (a batch of n items takes n consecutive
indexes) or none does. The call's records are stored once, concatenated, as ONE stream
entry ``<first index>-<indexes taken>`` — one XADD per call whatever the number of
messages; readers split the entry by the records' size prefixes. The script publishes
the partition number on the topic's notification channel for long polls.

Partition choice (:func:`choose_partition`): an explicit partition is checked against the
topic; a sequential topic hashes the businessId (Java ``String.hashCode``) over all its
partitions so a business key keeps its order; otherwise the partitions whose leader broker
is alive and writable take turns, each as often as the producer policy's weight for its
broker (default: the broker's own weight) says (:mod:`brokers.engine.turns`).

Exactly once, also when repeated: every call carries a request id (unique per process and
call), and the script keeps the latest :data:`REMEMBERED` (to twice as many) ids of the
partition in a sorted set scored by the first index each got. When a call's connection fails (a stale pooled
connection after a Redis restart, a connection reset), the engine does not know whether
Redis ran the script before the connection died, so it repeats the call once on a fresh
connection (:mod:`brokers.engine.reconnect`) with the same id: a script that finds the id
returns the index stored the first time and stores nothing. Ids are checked on every run,
not only on repeats, because a first attempt whose bytes were still queued in Redis may
run after its repeat. An id is remembered for at least the partition's next
:data:`REMEMBERED` appends; a repeat also passes the lowest index the first attempt could have got (the
next index the engine last saw for the partition), and when the set no longer reaches
that far back the script cannot tell and refuses (-1: :class:`AppendInDoubt`, reported as
the store being unavailable, as without the repeat) instead of perhaps storing twice. The
Redis Cluster client's own retries of a script on a connection error are made safe by the
same check. A repeat that finds its id still writes (one ``HSET`` of the meta hash) so
that a ``WAIT``/``WAITAOF`` on the repeat's connection also covers the first attempt's
write.

QoS — the call returns only after Redis executed the script, and then:

* ``NONE`` / ``RECEIVED``: the write is in Redis memory (and, with AOF on, handed to the
  AOF file before the reply is sent). A Redis crash with ``appendfsync everysec`` can
  lose up to about one second; ``NONE`` only tells front-ends not to reply.
* ``PERSISTED``: the write is fsynced to the AOF. Redis ≥ 7.2: ``WAITAOF 1 0`` on the
  writing connection. Redis 7.0 has no WAITAOF: run it with ``appendfsync always`` (each
  reply follows the fsync); with ``everysec`` PERSISTED degrades to RECEIVED and the engine
  logs it once (see :class:`brokers.engine.redisio.Durability`).
* ``REPLICATED``: ``WAIT`` for the replicas of the owning node (all connected ones, at
  most the engine's ``replicas`` setting); without replicas it means PERSISTED. A wait
  that times out raises :class:`WriteTimeout` — the write itself is stored.
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import secrets
import struct
from collections.abc import Sequence

from redis.exceptions import ConnectionError as RedisConnectionError

from brokers.engine.catalog import CatalogSnapshot, ProducerPolicyInfo, TopicInfo
from brokers.engine.errors import (
    BrokerNotLeader,
    BrokerNotWritable,
    NoWritablePartition,
    PartitionNotFound,
)
from brokers.engine.keys import PartitionKeys, notify_channel
from brokers.engine.model import QoS
from brokers.engine.reconnect import retry_on_fresh_connection
from brokers.engine.redisio import AnyRedis, Durability, Script, fmt_int
from brokers.engine.turns import PartitionTurns

REMEMBERED = 64  # request ids kept per partition: 64 to 128 (trimmed in batches, so the
# sorted set stays small enough for Redis's compact listpack encoding)

STAMP_LUA = """
-- stamp(blob, idx): records back to back (each starting with its size) with their index
-- fields written from idx on; a batch record (sysCode bit 12) takes its flag's count.
local function stamp(blob, idx)
  local parts, pos = {}, 1
  while pos <= #blob do
    local size = struct.unpack('>i4', blob, pos)
    local c = 1
    if math.floor(struct.unpack('>i2', blob, pos + 20) / 4096) % 2 == 1 then
      c = struct.unpack('>i2', blob, pos + 59)
      if c < 1 then c = 1 end
    end
    parts[#parts + 1] = string.sub(blob, pos, pos + 5) .. struct.pack('>i8', idx)
      .. string.sub(blob, pos + 14, pos + size - 1)
    idx = idx + c
    pos = pos + size
  end
  return table.concat(parts)
end
"""
"""The Lua that writes the indexes of records appended where the caller did not expect
(shared by :data:`APPEND` and the bounded append of :mod:`.overflow`)."""

APPEND = Script(
    STAMP_LUA
    + """
-- KEYS: stream, meta, request ids. ARGV: channel, notice (the partition, and claims),
-- expected first index, item
-- count, blob, request id, floor ('' on a first attempt; on a repeat the lowest first
-- index the first attempt could have got, -1 if unknown), ids remembered, leader ('' or
-- the broker appending as the partition's leader: refused (-2) when the meta hash
-- records another one, see brokers.engine.leadership).
-- The blob is the call's records concatenated (each starts with its size), stored as ONE
-- entry `<first>-<items>`. When the caller guessed the first index right, the records
-- already carry their indexes; otherwise each record's index is patched here.
local seen = redis.call('ZSCORE', KEYS[3], ARGV[6])
if seen then
  redis.call('HSET', KEYS[2], 'repeated', ARGV[6])
  return tonumber(seen)
end
if ARGV[9] ~= '' then
  local ldr = redis.call('HGET', KEYS[2], 'ldr')
  if ldr and ldr ~= ARGV[9] then return -2 end
end
local keep = tonumber(ARGV[8])
if ARGV[7] ~= '' and redis.call('ZCARD', KEYS[3]) >= keep then
  local floor = tonumber(ARGV[7])
  local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if floor < 0 or tonumber(oldest[2]) > floor then return -1 end
end
local nxt = tonumber(redis.call('HGET', KEYS[2], 'next') or '0')
local total = tonumber(ARGV[4])
local blob = ARGV[5]
if tonumber(ARGV[3]) ~= nxt then blob = stamp(blob, nxt) end
redis.call('XADD', KEYS[1], s(nxt) .. '-' .. s(total), 'm', blob)
redis.call('HSET', KEYS[2], 'next', s(nxt + total))
redis.call('HSETNX', KEYS[2], 'min', '0')
redis.call('PUBLISH', ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], s(nxt), ARGV[6])
if redis.call('ZCARD', KEYS[3]) > 2 * keep then
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, s(-keep - 1))
end
return nxt
"""
)

_I64 = struct.Struct(">q")


class AppendInDoubt(RedisConnectionError):
    """A repeated append could not tell whether its first attempt was stored."""


class RequestIds:
    """Append request ids unique across processes: a random prefix (new in every forked
    child, so SO_REUSEPORT workers never share one) and a counter."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._prefix = secrets.token_hex(8)
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):x}"


request_ids = RequestIds()


def pack_records(records: Sequence[tuple[bytes, int]], first: int) -> bytes:
    """Concatenate records, writing the index each gets when the append starts at ``first``."""
    blob = bytearray(b"".join(r for r, _ in records))
    pos, index = 0, first
    for record, count in records:
        _I64.pack_into(blob, pos + 6, index)
        pos += len(record)
        index += count
    return bytes(blob)


def guess_indexes(units: Sequence[tuple[bytes, int]], first: int) -> list[tuple[bytes, int]]:
    """``(record, count)`` units of ONE record each, stored one after the other from
    ``first``: each record with the index it gets when all are stored. (A unit of several
    records must carry consecutive indexes in all of them, as :func:`pack_records`
    writes: the bounded append's script checks only a unit's first record.)"""
    out, index = [], first
    for record, count in units:
        stamped = bytearray(record)
        _I64.pack_into(stamped, 6, index)
        out.append((bytes(stamped), count))
        index += count
    return out


async def append_records(
    client: AnyRedis,
    durability: Durability,
    topic: str,
    partition: int,
    records: Sequence[tuple[bytes, int]],
    qos: QoS = QoS.RECEIVED,
    expected_first: int = -1,
) -> int:
    """Append ``(record, count)`` pairs atomically to one partition; the first index.

    ``expected_first`` is the caller's guess of the partition's next index (the engine
    remembers it per partition): a right guess saves the script from rewriting records.
    """
    blob = pack_records(records, max(0, expected_first))
    total = sum(count for _, count in records)
    return await append_blob(client, durability, topic, partition, blob, total, qos, expected_first)


async def append_blob(
    client: AnyRedis,
    durability: Durability,
    topic: str,
    partition: int,
    blob: bytes,
    total: int,
    qos: QoS = QoS.RECEIVED,
    expected_first: int = -1,
    leader: int | None = None,
    notice: str | None = None,
    seen_next: int | None = None,
) -> int:
    """Append records already concatenated in ``blob`` (taking ``total`` indexes, carrying
    indexes from ``max(0, expected_first)`` on) atomically to one partition; the first index.

    ``seen_next``: the partition's next index as the caller last saw it stored (default
    ``expected_first``) — the lowest first index this call can get, which a repeat passes
    to the script. It differs from ``expected_first`` when the caller guesses past
    appends still in flight (see :meth:`brokers.engine.sections.log.LogSection._append`).

    With ``leader``, only while Redis records that broker as the partition's leader (or
    none): else :class:`BrokerNotLeader` and nothing is stored. ``notice``: what to
    publish on the topic's notification channel (default: the partition; see
    :meth:`brokers.engine.notify.Notifier.claim`)."""
    keys = PartitionKeys(topic, partition)
    script_keys = (keys.stream, keys.meta, keys.requests)
    rid = request_ids.next()
    said = partition if notice is None else notice
    args = (notify_channel(topic), said, expected_first, total, blob, rid)
    fence = "" if leader is None else str(leader)
    # a partial, not a nested function: compiled, a coroutine keeps its locals in one
    # scope object, and a closure defined in it would hold that scope in a reference
    # cycle — garbage for the collector at every append (see brokers/compiled.py)
    attempt = functools.partial(
        _append_attempt,
        durability,
        script_keys,
        args,
        qos,
        expected_first if seen_next is None else seen_next,
        fence,
        leader,
        f"{topic}/{partition}",
    )
    return await retry_on_fresh_connection(attempt)


async def _append_attempt(
    durability: Durability,
    script_keys: tuple[str, str, str],
    args: tuple[object, ...],
    qos: QoS,
    seen_next: int,
    fence: str,
    leader: int | None,
    where: str,
    repeat: bool,
) -> int:
    """One try of :func:`append_blob`'s script (``repeat``: the script checks whether
    the try before was stored after all, back to ``seen_next``)."""
    floor = fmt_int(seen_next) if repeat else ""
    first = int(await durability.run(APPEND, script_keys, (*args, floor, REMEMBERED, fence), qos))
    if first == -2:
        raise BrokerNotLeader(f"broker {leader} no longer leads {where}: the write was refused")
    if first < 0:
        raise AppendInDoubt(
            f"the connection of an append to {where} failed and too many "
            "appends followed it to tell whether it was stored: not repeated"
        )
    return first


def java_hash(text: str) -> int:
    """Java ``String.hashCode`` (UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _leader_ok(snapshot: CatalogSnapshot, topic: TopicInfo, partition: int) -> bool:
    if not topic.groups:
        return True
    leader = topic.leader_of(partition)
    broker = snapshot.brokers.get(leader) if leader is not None else None
    return broker is not None and broker.alive and broker.writable


def writable_partitions(snapshot: CatalogSnapshot, topic: TopicInfo) -> list[int]:
    """Partitions whose group leader is alive and writable (all, for a topic without groups)."""
    return [p for p in range(topic.partitions) if _leader_ok(snapshot, topic, p)]


def weighted_partitions(
    snapshot: CatalogSnapshot, topic: TopicInfo, policy: ProducerPolicyInfo | None
) -> list[tuple[int, int]]:
    """(partition, weight > 0) of the writable partitions: the producer policy's weight for
    the partition's leader broker, else the broker's own."""
    pairs = []
    for p in writable_partitions(snapshot, topic):
        leader = topic.leader_of(p)
        broker = snapshot.brokers.get(leader) if leader is not None else None
        weight = broker.weight if broker is not None else 1
        if policy is not None and leader is not None and policy.weights:
            weight = policy.weights.get(leader, policy.weights.get(str(leader), weight))  # type: ignore[call-overload]
        if int(weight) > 0:
            pairs.append((p, int(weight)))
    return pairs


def choose_partition(
    snapshot: CatalogSnapshot,
    topic: TopicInfo,
    policy: ProducerPolicyInfo | None,
    *,
    partition: int | None = None,
    business_id: str = "",
    turns: PartitionTurns | None = None,
    app: str = "",
    rng: random.Random | None = None,
) -> int:
    """Pick the partition of an append (see the module docstring): ``app``'s turn in
    ``turns``, or weighted random (``rng``) without them."""
    if partition is not None and partition >= 0:
        if partition >= topic.partitions:
            raise PartitionNotFound(f"{topic.code} has no partition {partition}")
        if not _leader_ok(snapshot, topic, partition):
            raise BrokerNotWritable(f"leader of {topic.code}/{partition} is not writable")
        return partition
    if topic.type == "sequential":
        if topic.partitions < 1:
            raise NoWritablePartition(f"{topic.code} has no partitions")
        chosen = abs(java_hash(business_id)) % topic.partitions if business_id else 0
        if not _leader_ok(snapshot, topic, chosen):
            raise BrokerNotWritable(f"leader of {topic.code}/{chosen} is not writable")
        return chosen
    if turns is not None:
        chosen = turns.next(
            topic.code, app, snapshot, lambda: weighted_partitions(snapshot, topic, policy)
        )
        if chosen < 0:
            raise NoWritablePartition(f"{topic.code} has no writable partition")
        return chosen
    pairs = weighted_partitions(snapshot, topic, policy)
    if not pairs:
        raise NoWritablePartition(f"{topic.code} has no writable partition")
    pick = (rng or random).random() * sum(w for _, w in pairs)
    for p, w in pairs:
        pick -= w
        if pick < 0:
            return p
    return pairs[-1][0]
