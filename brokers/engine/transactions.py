"""Producer transactions: prepare → produce into the log → commit or rollback.

The log of (topic, app) lives in slot ``{x:<topic>:<app>}``: a hash per transaction
(query id, start, timeout, state, last feedback), a list of ``<partition>|<record>``
entries and a sorted set of open transactions by deadline. Commit appends the logged
records partition by partition; each partition's append is atomic and leaves a marker
``{t:<topic>:<p>}:x:<txId>`` in the same script, so a retried commit (after a crash
between partitions) never appends twice: commit is idempotent. A committed
transaction's hash is kept for a day so that repeating the commit still succeeds.

Feedback (JMQ4 FETCH_PRODUCE_FEEDBACK) offers an open transaction with a query id once
it is past its deadline, at most once per 60 s. The sweep drops transactions without a
query id at their deadline and those with one a day after it, and finishes commits that
were interrupted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from brokers.engine.errors import TransactionLimit, TransactionNotFound
from brokers.engine.keys import PartitionKeys, TxKeys, notify_channel
from brokers.engine.model import QoS, TransactionInfo
from brokers.engine.redisio import AnyRedis, Durability, Script

MAX_OPEN = 10_240
FEEDBACK_INTERVAL_MS = 60_000
KEEP_MS = 86_400_000

PREPARE = Script(
    """
-- KEYS: open, seq. ARGV: query id, topic, app, now, timeout, max_open, meta prefix
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[6]) then return false end
local n = redis.call('INCR', KEYS[2])
local tx = ARGV[1] .. '_' .. ARGV[2] .. '_' .. ARGV[3] .. '_' .. s(n) .. '_' .. ARGV[4]
local now, timeout = tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('HSET', ARGV[7] .. tx, 'q', ARGV[1], 'start', ARGV[4], 'timeout', ARGV[5],
  'state', 'open', 'fb', '0', 'n', '0')
redis.call('ZADD', KEYS[1], s(now + timeout), tx)
return tx
"""
)

ADD = Script(
    """
-- KEYS: meta, log. ARGV: entries...
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return -1 end
for j = 1, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[j]) end
return redis.call('HINCRBY', KEYS[1], 'n', #ARGV)
"""
)

BEGIN_COMMIT = Script(
    """
-- KEYS: meta, log. Returns state and the log.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
if state == 'committed' then return {'committed'} end
if state == 'open' then redis.call('HSET', KEYS[1], 'state', 'committing') end
local out = {'committing'}
for _, e in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do out[#out + 1] = e end
return out
"""
)

APPEND_ONCE = Script(
    """
-- KEYS: stream, meta, marker. ARGV: channel, partition, keep_ms, then (count, record) pairs.
local done = redis.call('GET', KEYS[3])
if done then return tonumber(done) end
local nxt = tonumber(redis.call('HGET', KEYS[2], 'next') or '0')
local first = nxt
for i = 4, #ARGV, 2 do
  local c = tonumber(ARGV[i])
  local rec = ARGV[i + 1]
  rec = string.sub(rec, 1, 6) .. struct.pack('>i8', nxt) .. string.sub(rec, 15)
  redis.call('XADD', KEYS[1], s(nxt) .. '-' .. s(c), 'm', rec)
  nxt = nxt + c
end
redis.call('HSET', KEYS[2], 'next', s(nxt))
redis.call('HSETNX', KEYS[2], 'min', '0')
redis.call('SET', KEYS[3], s(first), 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return first
"""
)

FINISH = Script(
    """
-- KEYS: meta, log, open. ARGV: tx, state ('committed' | 'drop'), keep_ms
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
if ARGV[2] == 'drop' then
  return redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
)

ROLLBACK = Script(
    """
-- KEYS: meta, log, open. ARGV: tx
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
"""
)

FEEDBACK = Script(
    """
-- KEYS: open. ARGV: now, interval, meta prefix. One overdue open tx with a query id.
local now = tonumber(ARGV[1])
for _, tx in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', s(now), 'LIMIT', 0, 100)) do
  local h = ARGV[3] .. tx
  local m = redis.call('HMGET', h, 'q', 'fb', 'state', 'start', 'timeout', 'n')
  if m[1] and m[1] ~= '' and m[3] == 'open' and tonumber(m[2]) + tonumber(ARGV[2]) <= now then
    redis.call('HSET', h, 'fb', s(now))
    return {tx, m[1], m[4], m[5], m[6]}
  end
end
return false
"""
)


class Transactions:
    """Transactions of one (topic, app)."""

    def __init__(self, client: AnyRedis, durability: Durability, topic: str, app: str) -> None:
        self._client = client
        self._durability = durability
        self.topic, self.app = topic, app
        self.keys = TxKeys(topic, app)

    async def prepare(self, transaction_id: str, timeout_ms: int, now_ms: int) -> str:
        """Open a transaction; returns its txId (TransactionLimit past 10,240 open)."""
        tx = await PREPARE(
            self._client,
            (self.keys.open, self.keys.seq),
            (
                transaction_id,
                self.topic,
                self.app,
                now_ms,
                timeout_ms,
                MAX_OPEN,
                self.keys.meta(""),
            ),
        )
        if not tx:
            raise TransactionLimit(f"{MAX_OPEN} open transactions on {self.topic} for {self.app}")
        return tx.decode() if isinstance(tx, bytes) else str(tx)

    async def add(self, tx_id: str, entries: Sequence[tuple[int, bytes, int]]) -> int:
        """Log (partition, record, count) entries; returns the messages logged so far."""
        args = [b"%d|%d|" % (p, c) + record for p, record, c in entries]
        n = int(await ADD(self._client, (self.keys.meta(tx_id), self.keys.log(tx_id)), args))
        if n < 0:
            raise TransactionNotFound(f"transaction {tx_id} is not open")
        return n

    async def commit(self, tx_id: str, qos: QoS = QoS.RECEIVED) -> dict[int, int]:
        """Append the log into its partitions (idempotent); first index per partition."""
        meta, log = self.keys.meta(tx_id), self.keys.log(tx_id)
        raw = await BEGIN_COMMIT(self._client, (meta, log), ())
        state = raw[0].decode()
        if state == "missing":
            raise TransactionNotFound(f"transaction {tx_id} does not exist")
        if state == "committed":
            return {}
        by_partition: dict[int, list[object]] = defaultdict(list)
        for entry in raw[1:]:
            p, c, record = entry.split(b"|", 2)
            by_partition[int(p)] += [int(c), record]
        firsts: dict[int, int] = {}
        for p in sorted(by_partition):
            keys = PartitionKeys(self.topic, p)
            firsts[p] = int(
                await self._durability.run(
                    APPEND_ONCE,
                    (keys.stream, keys.meta, keys.tx_done(tx_id)),
                    [notify_channel(self.topic), p, KEEP_MS, *by_partition[p]],
                    qos,
                )
            )
        await FINISH(self._client, (meta, log, self.keys.open), (tx_id, "committed", KEEP_MS))
        return firsts

    async def rollback(self, tx_id: str) -> None:
        """Discard an open transaction."""
        done = await ROLLBACK(
            self._client, (self.keys.meta(tx_id), self.keys.log(tx_id), self.keys.open), (tx_id,)
        )
        if not int(done):
            raise TransactionNotFound(f"transaction {tx_id} is not open")

    async def feedback(self, now_ms: int) -> TransactionInfo | None:
        """One overdue open transaction with a query id, not offered in the last 60 s."""
        raw = await FEEDBACK(
            self._client, (self.keys.open,), (now_ms, FEEDBACK_INTERVAL_MS, self.keys.meta(""))
        )
        if not raw:
            return None
        tx, query, start, timeout, n = (x.decode() for x in raw)
        return TransactionInfo(tx, self.topic, self.app, query, int(start), int(timeout), int(n))

    async def open(self) -> list[TransactionInfo]:
        """Every open (or interrupted) transaction."""
        out = []
        for tx in await self._client.zrange(self.keys.open, 0, -1):
            tx = tx.decode()
            q, start, timeout, n = await self._client.hmget(
                self.keys.meta(tx), "q", "start", "timeout", "n"
            )
            if start is not None:
                out.append(
                    TransactionInfo(
                        tx,
                        self.topic,
                        self.app,
                        (q or b"").decode(),
                        int(start),
                        int(timeout),
                        int(n),
                    )
                )
        return out

    async def sweep(self, now_ms: int) -> int:
        """Drop expired transactions, finish interrupted commits; returns how many went."""
        dropped = 0
        overdue = await self._client.zrangebyscore(self.keys.open, "-inf", now_ms)
        for tx in overdue:
            tx = tx.decode()
            meta = self.keys.meta(tx)
            q, state, start, timeout = await self._client.hmget(
                meta, "q", "state", "start", "timeout"
            )
            if state == b"committing":
                await self.commit(tx)
                continue
            deadline = int(start or 0) + int(timeout or 0)
            if not q or now_ms >= deadline + KEEP_MS or state is None:
                await FINISH(
                    self._client, (meta, self.keys.log(tx), self.keys.open), (tx, "drop", 0)
                )
                dropped += 1
        return dropped
