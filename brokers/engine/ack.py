"""Acknowledgements: JMQ4 COMMIT_ACK rules and HTTP-MQ requestId commits.

JMQ4 (:func:`ack_range`): the acked indexes of one call form one run ``[start, end)``.
The ack index moves to ``end`` when the run starts at or before it, then swallows any
out-of-order runs that now touch it. A run beyond the ack index is kept (sorted set of
``start:end``) only when the caller holds the partition's lock and the run lies in the
range handed out under it; otherwise it is ignored (reference: code 0, no move). The
holder's ack releases its lock (jmq4.md §6.4: a successful ack releases the partition
lock) — also one that acks part of the batch, or a run beyond the ack index — so the next
fetch reads from the ack index again at once, stopping before the first index acked out
of order. Two exceptions keep the lock's range: a repeated ack of what is already acked
(a late duplicate does not free a newer batch), and a partial ack after the lock ran out
(the next fetch counts the rest as failed, as for any lapsed lock). A token older than a
still-valid lock is rejected as stale.

HTTP-MQ (:class:`CommitCall`, :data:`COMMIT`): http-mq.md §7 verbatim — no lock → dropped; older lockTime
than a valid lock → dropped; commit when the stored offset equals the batch start (or
forceAck / no offset yet); "offset has committed" / "committedOffset not equal"
otherwise; the lock is always released.

Both publish on the topic channel when they release a lock, waking long polls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from brokers.engine.errors import AckRejected
from brokers.engine.keys import PartitionKeys, notify_channel
from brokers.engine.model import AckStatus, CommitResult, CommitStatus
from brokers.engine.redisio import AnyRedis, Script

LARGEST_INDEX = 2**53 - 1
"""The largest index (offset) and lock time a commit takes: what the scripts hold exactly
(Lua numbers are doubles; past 2^63 ``%d`` wraps, and a committed −2^63 left its queue
redelivering one batch for good)."""


def commit_illegal(offset: int, next_offset: int, lock_time: int, force: bool) -> bool:
    """Whether no commit can come of these numbers (http-mq.md §7 "ack illegal"): an offset
    or nextOffset that is not a position (negative, or past what the scripts hold exactly),
    a nextOffset below the offset without forceAck, a lock time out of range."""
    return (
        not 0 <= offset <= LARGEST_INDEX
        or not 0 <= next_offset <= LARGEST_INDEX
        or (next_offset < offset and not force)
        or abs(lock_time) > LARGEST_INDEX
    )


def contiguous(indexes: Sequence[int]) -> tuple[int, int]:
    """``[start, end)`` of a contiguous run of distinct indexes; AckRejected otherwise."""
    if isinstance(indexes, range):
        if indexes.step != 1 or len(indexes) == 0:
            raise AckRejected("acked indexes must be a non-empty contiguous run")
        return indexes.start, indexes.stop
    if not indexes:
        raise AckRejected("no indexes to ack")
    lo, hi = min(indexes), max(indexes)
    if hi - lo + 1 != len(indexes) or len(set(indexes)) != len(indexes):
        raise AckRejected("acked indexes are not contiguous or have duplicates")
    return lo, hi + 1


MERGE_FN = """
local function merge(oo, ack)
  while true do
    local r = redis.call('ZRANGEBYSCORE', oo, '-inf', s(ack), 'LIMIT', 0, 1)
    if not r[1] then return ack end
    local e = tonumber(string.match(r[1], ':(%d+)$'))
    if e > ack then ack = e end
    redis.call('ZREM', oo, r[1])
  end
end
local function unlock(state, channel, partition, wake)
  redis.call('HDEL', state, 'lo', 'lt', 'le', 'ls', 'lend')
  if wake ~= false then redis.call('PUBLISH', channel, partition) end
end
"""

ACK = Script(
    MERGE_FN
    + """
-- KEYS: state, oo, meta. ARGV: start, end, owner, token(''), now, channel, partition
local start, stop, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[5])
local st = redis.call('HMGET', KEYS[1], 'ack', 'lo', 'lt', 'le', 'ls', 'lend')
local ack = tonumber(st[1])
if not ack then ack = tonumber(redis.call('HGET', KEYS[3], 'min') or '0') end
local lt, le = tonumber(st[3]), tonumber(st[4])
local valid = le and le > now
if ARGV[4] ~= '' and lt and valid and tonumber(ARGV[4]) < lt then return {'STALE_LOCK', s(ack)} end
local holder = lt and ((ARGV[4] ~= '' and tonumber(ARGV[4]) == lt) or (ARGV[4] == '' and st[2] == ARGV[3]))
local status
if stop <= ack then
  status = 'ALREADY'
elseif start <= ack then
  ack = merge(KEYS[2], stop)
  redis.call('HSET', KEYS[1], 'ack', s(ack))
  status = 'OK'
else
  local ls, lend = tonumber(st[5]), tonumber(st[6])
  if holder and ls and lend and start >= ls and stop <= lend then
    redis.call('ZADD', KEYS[2], s(start), s(start) .. ':' .. s(stop))
    status = 'PENDING'
  else
    status = 'IGNORED'
  end
end
-- the holder's ack releases its lock (jmq4.md §6.4); one that leaves part of the locked
-- range unacked only while the lock is still valid: a lock that ran out keeps its range
-- until the next fetch counts what of it was not acked as failed (consume.py)
local lend = tonumber(st[6])
if holder and ((not lend) or ack >= lend or (valid and status ~= 'ALREADY')) then
  -- wake a fetch only when the partition holds more than was just acknowledged
  local nxt = tonumber(redis.call('HGET', KEYS[3], 'next') or '0')
  unlock(KEYS[1], ARGV[6], ARGV[7], nxt > ack)
end
return {status, s(ack)}
"""
)

COMMIT_FN = """
-- commit_one(state, oo, meta, A, ab): http-mq.md §7 on one partition's state, with
-- A[ab + 1 .. ab + 7] = offset, next, lockTime, force ('0'/'1'), now, channel, partition
-- (the arguments of CommitCall). Returns {status, committed, stored lock, expired, anomaly,
-- moved from}: `moved from` is the committed offset a forceAck moved away from other than
-- by a batch's progress (from the committed offset forward): the client rewound or
-- skipped by itself; else -1.
-- A nextOffset past the partition's end commits the end (http-mq.md OFFSET_ILLEGAL: a
-- position outside the queue is corrected), or what is appended up to it is never read.
local function commit_one(state, oo, meta, A, ab)
  local off, nxt, token = tonumber(A[ab + 1]), tonumber(A[ab + 2]), tonumber(A[ab + 3])
  local force, now, channel, partition = A[ab + 4], tonumber(A[ab + 5]), A[ab + 6], A[ab + 7]
  local st = redis.call('HMGET', state, 'ack', 'lt', 'le')
  local lt, le = tonumber(st[2]), tonumber(st[3])
  local cmt = tonumber(st[1])
  local cmts = '-1'
  if cmt then cmts = s(cmt) end
  if not lt then return {'lock not exist', cmts, '0', 0, 0, -1} end
  local expired, anomaly, moved = 0, 0, -1
  if le <= now then expired = 1
  elseif token < lt then return {'ack lockTime small than', cmts, s(lt), 0, 0, -1}
  elseif token > lt then anomaly = 1 end
  local status
  if (not cmt) or force == '1' or (cmt == off and nxt > cmt) then
    local before = cmt
    if force == '1' or not cmt then redis.call('DEL', oo) end
    local last = tonumber(redis.call('HGET', meta, 'next') or '0')
    if nxt > last then nxt = last end
    cmt = merge(oo, nxt)
    redis.call('HSET', state, 'ack', s(cmt))
    if before and cmt ~= before and not (off == before and cmt > before) then
      moved = before  -- not a batch's progress: a forceAck that rewound or skipped
    end
    status = 'ok'
  elseif cmt == nxt then status = 'offset has committed'
  else status = 'committedOffset not equal' end
  unlock(state, channel, partition)
  return {status, s(cmt), s(lt), expired, anomaly, moved}
end
"""

COMMIT = Script(
    MERGE_FN
    + COMMIT_FN
    + """
-- KEYS: state, oo, meta. ARGV: offset, next, lockTime, force(0/1), now, channel, partition
return commit_one(KEYS[1], KEYS[2], KEYS[3], ARGV, 0)
"""
)


@dataclass(frozen=True, slots=True)
class CommitCall:
    """An HTTP-MQ commit ready to run: the keys and arguments of :data:`COMMIT` (or of
    the commit step of a combined script, :data:`brokers.engine.scan.COMMIT_FETCH_ANY`)."""

    keys: tuple[str, str, str]
    args: tuple[Any, ...]

    @classmethod
    def of(
        cls,
        topic: str,
        partition: int,
        cid: str,
        *,
        offset: int,
        next_offset: int,
        lock_time: int,
        force: bool,
        now_ms: int,
    ) -> CommitCall:
        keys = PartitionKeys(topic, partition)
        return cls(
            (keys.state(cid), keys.acked(cid), keys.meta),
            (
                offset,
                next_offset,
                lock_time,
                1 if force else 0,
                now_ms,
                notify_channel(topic),
                partition,
            ),
        )

    async def run(self, client: AnyRedis) -> CommitResult:
        """Run it on its own."""
        return commit_result(await COMMIT(client, self.keys, self.args))


def commit_result(raw: list) -> CommitResult:
    """The commit script's reply (``commit_one``'s) as a :class:`CommitResult`."""
    status, cmt, lt, expired, anomaly, moved = raw
    return CommitResult(
        CommitStatus(status.decode()),
        int(cmt),
        int(lt),
        bool(expired),
        bool(anomaly),
        int(moved),
    )


async def ack_range(
    client: AnyRedis,
    topic: str,
    partition: int,
    cid: str,
    start: int,
    end: int,
    *,
    owner: str,
    token: int | None,
    now_ms: int,
) -> tuple[AckStatus, int]:
    """Apply a JMQ4 ack of ``[start, end)``; returns (status, ack index after)."""
    keys = PartitionKeys(topic, partition)
    status, ack = await ACK(
        client,
        (keys.state(cid), keys.acked(cid), keys.meta),
        (
            start,
            end,
            owner,
            "" if token is None else token,
            now_ms,
            notify_channel(topic),
            partition,
        ),
    )
    return AckStatus(status.decode()), int(ack)
