"""Numbers for lists of many consumer groups and topics, in a fixed number of round trips.

A console list of thousands of consumers must not cost a Redis round trip per row:
:func:`group_lags` reads the bounds and ack index of every partition of every group in one
pipeline (one script call per partition: its bounds and every reader's ack index), then
the first unacked record of each partition that lags in a second one (once per index)
(``XREVRANGE … COUNT 1``: the entry holding that index), so a whole page — or a whole
fleet — costs two round trips. :func:`produce_rates` reads the per-minute produce counters
of many topics with one ``HMGET`` each, pipelined. Pipelines are cut into chunks so a very
long list never builds one huge reply; on a Redis Cluster the client splits each chunk by
node.

Lag is computed exactly as :func:`brokers.engine.offsets.progress` computes it for the
consumer page (``next - max(ack, min)``, or ``next - min`` before the first ack), so the
list, the consumer page and the API agree.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from brokers.engine.keys import PartitionKeys, consumer_id, counter_key
from brokers.engine.record import record_store_time
from brokers.engine.redisio import AnyRedis, Script, run_pipelined

CHUNK = 2000  # partitions (or topics) per pipeline execution
MAX_INDEX = "18446744073709551615"


@dataclass(frozen=True, slots=True)
class GroupLag:
    """How far one consumer group is behind, over all partitions of its topic."""

    topic: str
    app: str
    lag: int
    """Messages stored and not yet acknowledged (the sum of the partitions' lags)."""
    oldest_unacked_ms: int
    """Store time of the oldest unacknowledged message (0 when nothing lags)."""
    lagging_partitions: int

    def oldest_age_ms(self, now_ms: int) -> int | None:
        """How long the oldest unacknowledged message has waited (None when none waits)."""
        return max(0, now_ms - self.oldest_unacked_ms) if self.oldest_unacked_ms else None


def worst(a: GroupLag, b: GroupLag) -> GroupLag:
    """Of two clients (members) of one consumer, the figures of the one further behind:
    the larger lag, the older unacknowledged message."""
    oldest = min((t for t in (a.oldest_unacked_ms, b.oldest_unacked_ms) if t), default=0)
    lagging = max(a.lagging_partitions, b.lagging_partitions)
    return GroupLag(a.topic, a.app, max(a.lag, b.lag), oldest, lagging)


@dataclass(frozen=True, slots=True)
class TopicRate:
    """Messages produced to a topic in the last whole minutes."""

    topic: str
    minutes: int
    produced: int

    @property
    def per_second(self) -> float:
        return self.produced / (self.minutes * 60) if self.minutes else 0.0


@dataclass(frozen=True, slots=True)
class GroupRef:
    """A consumer group to measure: topic, app, the topic's partition count, client id."""

    topic: str
    app: str
    partitions: int
    client_id: str | None = None


ACKS_CHUNK = 1000
"""Consumers whose ack index one script call reads in one partition."""
PARTITION_ACKS = Script(
    """
-- KEYS[1]: a partition's meta; KEYS[2..]: consumers' states in it (one slot).
-- Returns {min, next, ack of each consumer...}, '' for what is not there.
local m = redis.call('HMGET', KEYS[1], 'min', 'next')
local out = {m[1] or '', m[2] or ''}
for i = 2, #KEYS do out[#out + 1] = redis.call('HGET', KEYS[i], 'ack') or '' end
return out
"""
)


SUM_MINUTES = Script(
    """
-- KEYS[1]: a day's counters hash; ARGV: first and last minute of the day, field suffix.
-- Returns the sum of those minutes' fields (one reply however many minutes).
local fields = {}
for m = tonumber(ARGV[1]), tonumber(ARGV[2]) do fields[#fields + 1] = m .. ARGV[3] end
local total = 0
for _, v in ipairs(redis.call('HMGET', KEYS[1], unpack(fields))) do
  if v then total = total + tonumber(v) end
end
return total
"""
)


def _day(minute: int) -> str:
    """The UTC day of a minute, as the counters' keys name it."""
    return time.strftime("%Y%m%d", time.gmtime(minute * 60))


def _chunks(items: Sequence, size: int = CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def _pipelined(client: AnyRedis, calls: Sequence[tuple]) -> list:
    """Run ``(method, *args)`` calls in chunked non-transactional pipelines."""
    replies: list = []
    for chunk in _chunks(calls):
        pipe = client.pipeline(transaction=False)
        for method, *args in chunk:
            getattr(pipe, method)(*args)
        replies.extend(await pipe.execute())
    return replies


def _first_unacked(lo: bytes | None, hi: bytes | None, ack: bytes | None) -> tuple[int, int]:
    """(first unacked index, lag) of one partition from its min, next and ack index."""
    mn, mx = int(lo or 0), int(hi or 0)
    start = max(int(ack), mn) if ack is not None else mn
    return start, mx - start


async def group_lags(client: AnyRedis, groups: Sequence[GroupRef]) -> list[GroupLag]:
    """Lag and oldest unacked message of each group, in ``groups`` order. What several
    progresses of one topic share is read once: a partition's bounds and the ack indexes
    of everyone reading it (one script call per partition), and the first unacked record
    at an index (a broadcast consumer's clients are mostly at the same few places)."""
    slots = [(g, p) for g in groups for p in range(g.partitions)]
    readers: dict[tuple[str, int], dict[str, None]] = {}  # partition -> its consumers
    for g, p in slots:
        readers.setdefault((g.topic, p), {})[consumer_id(g.app, g.client_id)] = None
    calls: list[tuple[list[str], list[str]]] = []
    owners: list[tuple[str, int, list[str]]] = []
    for (topic, p), cids in readers.items():
        keys = PartitionKeys(topic, p)
        names = list(cids)
        for start in range(0, len(names), ACKS_CHUNK):
            chunk = names[start : start + ACKS_CHUNK]
            calls.append(([keys.meta, *(keys.state(c) for c in chunk)], []))
            owners.append((topic, p, chunk))
    acks: dict[tuple[str, int, str], bytes | None] = {}
    bounds: dict[tuple[str, int], tuple[bytes | None, bytes | None]] = {}
    for start in range(0, len(calls), CHUNK // 4):
        replies = await run_pipelined(client, PARTITION_ACKS, calls[start : start + CHUNK // 4])
        for (topic, p, chunk), reply in zip(
            owners[start : start + CHUNK // 4], replies, strict=True
        ):
            bounds[(topic, p)] = (reply[0] or None, reply[1] or None)
            for cid, ack in zip(chunk, reply[2:], strict=True):
                acks[(topic, p, cid)] = ack or None
    firsts: list[tuple[int, int]] = []  # per slot: (first unacked, lag)
    for g, p in slots:
        lo, hi = bounds[(g.topic, p)]
        firsts.append(_first_unacked(lo, hi, acks[(g.topic, p, consumer_id(g.app, g.client_id))]))
    heads_of = list(
        dict.fromkeys(
            (g.topic, p, start)
            for (g, p), (start, lag) in zip(slots, firsts, strict=True)
            if lag > 0
        )
    )
    heads = await _pipelined(
        client,
        [
            ("xrevrange", PartitionKeys(topic, p).stream, f"{start}-{MAX_INDEX}", "-", 1)
            for topic, p, start in heads_of
        ],
    )
    oldest: dict[tuple[str, int, int], int] = {}
    for where, entries in zip(heads_of, heads, strict=True):
        if entries:
            _, fields = entries[0]
            blob = fields.get(b"m") or next(iter(fields.values()), b"")
            if len(blob) >= 51:
                oldest[where] = record_store_time(blob)
    out: list[GroupLag] = []
    position = 0
    for g in groups:
        total, first_ms, behind = 0, 0, 0
        for i in range(position, position + g.partitions):
            start, lag = firsts[i]
            if lag > 0:
                total += lag
                behind += 1
                stored = oldest.get((g.topic, slots[i][1], start), 0)
                if stored and (not first_ms or stored < first_ms):
                    first_ms = stored
        position += g.partitions
        out.append(GroupLag(g.topic, g.app, total, first_ms, behind))
    return out


async def produce_rates(
    client: AnyRedis,
    topics: Sequence[str],
    *,
    minutes: int,
    now_ms: int | None = None,
    through_current: bool = False,
) -> list[TopicRate]:
    """Messages produced to each topic in the ``minutes`` whole minutes before the current
    one (so a minute still filling never drags the rate down), in ``topics`` order; with
    ``through_current``, the ``minutes`` ending with the current one (whether anything
    was produced lately)."""
    now_minute = int((time.time() * 1000 if now_ms is None else now_ms) // 60_000)
    end = now_minute + 1 if through_current else now_minute
    spans: dict[str, list[int]] = {}  # day → [first, last] minute of the day in the window
    for minute in range(end - minutes, end):
        day, of_day = _day(minute), minute % 1440
        span = spans.setdefault(day, [of_day, of_day])
        span[1] = of_day
    calls = [
        ((counter_key("topic", topic, day),), (first, last, ":p"))
        for topic in topics
        for day, (first, last) in spans.items()
    ]
    replies: list = []
    for chunk in _chunks(calls):
        replies.extend(await run_pipelined(client, SUM_MINUTES, chunk))
    rates: list[TopicRate] = []
    per_topic = len(spans)
    for n, topic in enumerate(topics):
        produced = sum(int(r) for r in replies[n * per_topic : (n + 1) * per_topic])
        rates.append(TopicRate(topic, minutes, produced))
    return rates
