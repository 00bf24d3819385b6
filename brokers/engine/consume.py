"""Broker-managed consumption: lock a partition and read from its ack index.

State per (app, topic, partition) — per clientId for broadcast — is the hash
``{t:<topic>:<p>}:c:<cid>`` with ``ack`` (next index to consume), the lock ``lo`` (owner),
``lt`` (token), ``le`` (expiry ms), ``ls``/``lend`` (range handed out under the lock: what of it is not acked when the lock
runs out is counted as failed by the next fetch, once),
``lk`` (last token issued), ``t`` (last access ms) and ``ip`` (last client address).

One Lua script per attempt checks the lock, initialises the ack index on first use
(an ack index retention overtook moves up to ``min``), reads from it and takes the lock
only if it found messages — so a fetch is a single round trip on the partition's slot.
Tokens are ms timestamps made strictly increasing per partition, which is what HTTP-MQ's
``lockTime`` needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from brokers.engine.keys import PartitionKeys, notify_channel
from brokers.engine.model import Delivery
from brokers.engine.read import READ_FN, parse_spans
from brokers.engine.redisio import AnyRedis, Script, run_pipelined

LOCKED, EMPTY, FOUND = -1, 0, 1

FETCH_FN = """
-- Lock-and-read one partition. now is a number; the other arguments are ARGV strings.
-- Returns {-1, lock expiry} | {0, ack, next, min, blocked store time or 0, lapsed,
-- corrected} | {1, ack, next, min, token, expiry, first, lapsed, corrected, entries...};
-- `lapsed`: how many messages of the batch handed out under a lock that ran out were not
-- acked (the consumer failed them: each lapsed lock is counted once); `corrected`: the
-- ack index this call found outside the partition and moved (-1: none). With `report` '1'
-- a moved ack index is reported instead of read past: the lock is taken over the empty
-- range at the new index ({1, ..., corrected} with no entries), so the caller can hand
-- out a token that confirms the move and nothing counts as read or lapsed.
-- `ranges` are the partition's shared-lease keys {rs, rd, rh} (see groups.py) and the
-- consumer's out-of-order acks (ack.py).
local function fetch_one(stream, meta, state, ranges, owner, now, timeout_ms, want, addr, init,
                         max_store, report, cap)
  local st = redis.call('HMGET', state, 'ack', 'le', 'lk', 'sh', 'lo', 'ls', 'lend')
  local le = tonumber(st[2])
  if le and le > now then return {-1, s(le)} end
  local lapsed = 0
  if le and st[5] then  -- a lock that ran out: what of its batch was not acked
    local from = math.max(tonumber(st[1] or '0'), tonumber(st[6] or '0'))
    local upto = tonumber(st[7] or '0')
    if upto > from then
      lapsed = upto - from
      -- what of it was acked out of order is not failed (nor delivered again, below)
      local acked = redis.call('ZRANGEBYSCORE', ranges[4], s(from), '(' .. s(upto))
      for _, r in ipairs(acked) do
        local a, b = string.match(r, '^(%d+):(%d+)$')
        lapsed = lapsed - (math.min(tonumber(b), upto) - tonumber(a))
      end
      if lapsed < 0 then lapsed = 0 end
    end
    redis.call('HDEL', state, 'lo')
  end
  if st[4] then
    -- shared leases (zbus, VibeMQ) hold ranges of this partition. While one is leased, or
    -- backing off after a failure, wait for it; once every range is due and no push
    -- consumer took it, pulling takes the partition over from the ack index (what those
    -- ranges held is delivered again: at least once).
    local later = redis.call('ZRANGEBYSCORE', ranges[2], '(' .. s(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if later[2] then return {-1, s(math.max(tonumber(later[2]), now + 100))} end
    redis.call('DEL', ranges[1], ranges[2], ranges[3])
    redis.call('HDEL', state, 'sh')
    if st[1] then redis.call('HSET', state, 'cur', st[1]) end
  end
  local m = redis.call('HMGET', meta, 'min', 'next')
  local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
  local ack = tonumber(st[1])
  local first, corrected = 0, -1
  if not ack then
    first = 1
    if init == 'latest' then ack = nxt else ack = mn end
    redis.call('HSET', state, 'ack', s(ack))
  elseif ack > nxt then
    -- committed past the end (an HTTP-MQ forceAck or nextOffset beyond it): corrected to
    -- the end (http-mq.md OFFSET_ILLEGAL), or what is appended up to there is never read
    corrected, ack = ack, nxt
    redis.call('HSET', state, 'ack', s(ack))
  elseif ack < mn then
    -- retention took messages before this consumer acked them (counted as its losses
    -- then, retention.py): nobody can ack them now, so its position moves to the first
    -- message kept, and what it reads from there commits (HTTP-MQ) and acks (JMQ4) as
    -- any batch does; left behind, an index ack would wait for them for ever
    corrected, ack = ack, mn
    redis.call('HSET', state, 'ack', s(ack))
  end
  if addr ~= '' then redis.call('HSET', state, 't', s(now), 'ip', addr)
  else redis.call('HSET', state, 't', s(now)) end
  local function lock(lend)
    local token = now
    local lk = tonumber(st[3])
    if lk and token <= lk then token = lk + 1 end
    local exp = now + tonumber(timeout_ms)
    redis.call('HSET', state, 'lo', owner, 'lt', s(token), 'le', s(exp), 'ls', s(ack),
      'lend', s(lend), 'lk', s(token))
    return {1, s(ack), s(nxt), s(mn), s(token), s(exp), first, lapsed, s(corrected)}
  end
  if corrected >= 0 and report == '1' then return lock(ack) end
  local start = ack
  if start < mn then start = mn end
  if start >= nxt then return {0, s(ack), s(nxt), s(mn), '0', lapsed, s(corrected)} end
  local limit = nil
  if max_store ~= '' then limit = tonumber(max_store) end
  want = tonumber(want)
  -- indexes acked out of order under an earlier lock that ran out (or was released): the
  -- read stops before the first of them, so they are not delivered again; once what comes
  -- before is acked, the ack index moves past them (ack.py merge)
  local pending = redis.call('ZRANGEBYSCORE', ranges[4], '(' .. s(start), '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  if pending[2] then want = math.min(want, tonumber(pending[2]) - start) end
  local out = {}
  -- cap: the bytes of records the caller has room for (a JMQ4 response frame), at least
  -- one record; never more than PULL_READ_BYTES
  local bytes = PULL_READ_BYTES
  cap = tonumber(cap or '0') or 0
  if cap > 0 and cap < bytes then bytes = cap end
  local items, blocked = read_span(stream, start, want, out, limit, bytes)
  if items == 0 then
    return {0, s(ack), s(nxt), s(mn), s(blocked or 0), lapsed, s(corrected)}
  end
  local res = lock(tonumber(out[#out - 2]) + tonumber(out[#out - 1]))
  for _, v in ipairs(out) do res[#res + 1] = v end
  return res
end
"""

FETCH = Script(
    READ_FN
    + FETCH_FN
    + """
-- KEYS: stream, meta, state, range starts, range deadlines, ranges, out-of-order acks.
-- ARGV: owner, now, timeout_ms, want, addr, init, max_store, report, cap (bytes; 0: none)
return fetch_one(KEYS[1], KEYS[2], KEYS[3], {KEYS[4], KEYS[5], KEYS[6], KEYS[7]}, ARGV[1],
  tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9])
"""
)

RELEASE = Script(
    """
-- KEYS: state. ARGV: token, channel, partition, owner. Unlock without committing, only
-- for the given token ('' = no token: then only for the given owner; both '' = any).
local st = redis.call('HMGET', KEYS[1], 'lt', 'lo')
local lt = st[1]
if not lt then return 0 end
if ARGV[1] ~= '' and lt ~= ARGV[1] then return 0 end
if ARGV[1] == '' and ARGV[4] ~= '' and st[2] ~= ARGV[4] then return 0 end
redis.call('HDEL', KEYS[1], 'lo', 'lt', 'le', 'ls', 'lend')
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
"""
)


RELEASE_HELD = Script(
    """
-- KEYS: state. ARGV: owner prefix, now, channel, partition. Unlock without committing when
-- the lock's owner starts with the prefix (a process that is gone) and it has not expired
-- (an expired lock is free already). 1 when unlocked; wakes long polls.
local st = redis.call('HMGET', KEYS[1], 'lo', 'le')
if not st[1] or string.sub(st[1], 1, #ARGV[1]) ~= ARGV[1] then return 0 end
if tonumber(st[2] or '0') <= tonumber(ARGV[2]) then return 0 end
redis.call('HDEL', KEYS[1], 'lo', 'lt', 'le', 'ls', 'lend')
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
"""
)


async def release_held(
    client: AnyRedis,
    topic: str,
    partitions: Sequence[int],
    cid: str,
    owner_prefix: str,
    *,
    now_ms: int,
) -> int:
    """Drop the unexpired locks on ``partitions`` whose owner starts with ``owner_prefix``
    (a lease holder that is gone, :mod:`brokers.engine.holders`); how many. One round trip."""
    channel = notify_channel(topic)
    calls = [
        ((PartitionKeys(topic, p).state(cid),), (owner_prefix, now_ms, channel, p))
        for p in partitions
    ]
    return sum(int(n) for n in await run_pipelined(client, RELEASE_HELD, calls))


def fetch_keys(keys: PartitionKeys, cid: str) -> tuple[str, ...]:
    """The keys :data:`FETCH_FN` reads for consumer ``cid`` of one partition."""
    return (
        keys.stream,
        keys.meta,
        keys.state(cid),
        keys.range_starts(cid),
        keys.range_due(cid),
        keys.ranges(cid),
        keys.acked(cid),
    )


STATE_FIELDS = ("ack", "lo", "lt", "le", "t", "ip")


class Attempt:
    """Outcome of one FETCH script call."""

    __slots__ = (
        "ack",
        "blocked",
        "corrected",
        "deliveries",
        "expires",
        "first",
        "lapsed",
        "max",
        "min",
        "status",
        "token",
    )

    def __init__(self, partition: int, raw: list) -> None:
        self.status = int(raw[0])
        self.deliveries: list[Delivery] = []
        self.token = self.expires = 0
        self.first = False
        self.blocked = 0  # store time of the first message held back by a delay
        self.lapsed = 0  # messages a lock that ran out left unacked
        self.corrected = -1  # the ack index found outside the partition, moved to ack
        self.ack = self.max = self.min = -1
        if self.status == LOCKED:
            self.expires = int(raw[1])
            return
        self.ack, self.max, self.min = int(raw[1]), int(raw[2]), int(raw[3])
        if self.status == EMPTY:
            self.blocked, self.lapsed = int(raw[4]), int(raw[5])
            self.corrected = int(raw[6])
            return
        self.token, self.expires, self.first = int(raw[4]), int(raw[5]), bool(int(raw[6]))
        self.lapsed, self.corrected = int(raw[7]), int(raw[8])
        self.deliveries = parse_spans(partition, raw, 9)


async def try_partition(
    client: AnyRedis,
    topic: str,
    partition: int,
    cid: str,
    *,
    owner: str,
    now_ms: int,
    timeout_ms: int,
    count: int,
    address: str,
    init: str,
    max_store_ms: int | None,
    report_correction: bool = False,
    max_bytes: int = 0,
) -> Attempt:
    """Run the lock-and-read script on one partition; with ``report_correction`` an ack
    index found outside the partition is moved and locked over nothing, not read past.
    ``max_bytes`` > 0 reads records while their bytes stay within it (at least one)."""
    keys = PartitionKeys(topic, partition)
    raw = await FETCH(
        client,
        fetch_keys(keys, cid),
        (
            owner,
            now_ms,
            timeout_ms,
            count,
            address,
            init,
            "" if max_store_ms is None else max_store_ms,
            1 if report_correction else 0,
            max_bytes,
        ),
    )
    return Attempt(partition, raw)


async def release(
    client: AnyRedis,
    topic: str,
    partition: int,
    cid: str,
    token: int | None = None,
    owner: str = "",
) -> bool:
    """Drop the lock if it still carries ``token`` (or, without one, belongs to ``owner``;
    neither given: whoever holds it); wakes long polls."""
    keys = PartitionKeys(topic, partition)
    args = ("" if token is None else str(token), notify_channel(topic), partition, owner)
    return bool(await RELEASE(client, (keys.state(cid),), args))


ACCESS_EVERY_MS = 1000
"""A fetch of nothing records its access at most this often per client and partition."""


def recent_access(state: dict[str, bytes | None], now_ms: int, address: str) -> bool:
    """Whether the access a fetch of nothing would record is already there: the same
    address, recorded less than :data:`ACCESS_EVERY_MS` ago (FETCH_ANY's rule)."""
    same = not address or (state.get("ip") or b"").decode() == address
    return same and now_ms - int(state.get("t") or 0) < ACCESS_EVERY_MS


async def record_access(
    client: AnyRedis, topic: str, partition: int, cid: str, now_ms: int, address: str
) -> None:
    """Record consumer ``cid``'s access to ``partition`` (time, and address when known)
    as the lock-and-read script does: a fetch that found nothing looked there."""
    fields: dict[str, str | int] = {"t": now_ms}
    if address:
        fields["ip"] = address
    await client.hset(PartitionKeys(topic, partition).state(cid), mapping=fields)


async def read_states(
    client: AnyRedis, topic: str, partitions: Sequence[int], cid: str
) -> list[tuple[int, int, dict[str, bytes | None]]]:
    """(min, next, state fields) of each partition, in one pipeline."""
    pipe = client.pipeline(transaction=False)
    for p in partitions:
        keys = PartitionKeys(topic, p)
        pipe.hmget(keys.meta, "min", "next")
        pipe.hmget(keys.state(cid), *STATE_FIELDS)
    raw = await pipe.execute()
    out = []
    for i in range(len(partitions)):
        (lo, hi), st = raw[2 * i], raw[2 * i + 1]
        out.append((int(lo or 0), int(hi or 0), dict(zip(STATE_FIELDS, st, strict=True))))
    return out
