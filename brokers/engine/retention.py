"""Retention: trim partitions by max age and max count, moving the min index, and count
what each consumer lost to it.

The cut is the larger of ``next - max_count`` and the first index stored at or after
``now - max_age``. Entries wholly below the cut are removed (XTRIM MINID); an entry (one
append call, or a batch) that straddles the cut is kept whole, so a partition may hold
up to one call's messages more than ``max_count``; ``min`` becomes the first index still
stored. A consumer whose ack index falls below ``min`` continues from ``min``: its next
fetch moves the ack index there (:mod:`.consume`), a lease its cursor (:mod:`.groups`).

The messages a trim takes that a consumer had neither settled nor in hand are lost to
it (the reference console's "offset illegal" alert: a position outside the queue). The
trim script measures them for the progresses it is given, in the same step as the trim,
so nothing is counted twice however often retention runs: above the ack index, what is
past the delivery cursor (shared leases) and not in a batch a pull consumer holds
locked, and what of the ranges below the cursor nobody holds — handed back unread, due
again after a failed or released delivery, or dead and waiting for the dead-letter
queue — less the parts already settled. A range still leased is in a consumer's hands,
expired or not (it may still be acked), as is a locked batch. A progress never started
(no ack index) has lost nothing. The losses add up per consumer group in the hash
``LOSSES`` until the alert check settles them (:func:`settle_losses`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from brokers.engine.catalog import TopicInfo
from brokers.engine.keys import PREFIX, PartitionKeys, consumer_id
from brokers.engine.read import FIND_TIME_FN
from brokers.engine.redisio import AnyRedis, Script, run_pipelined

LOSSES = f"{PREFIX}:lost"
"""Hash: ``<topic>|<app>`` → messages retention took before that consumer group read
them, not yet settled by an alert."""

TRIM_CHUNK = 1_000
"""Partitions trimmed per pipelined round trip."""

TRIM = Script(
    FIND_TIME_FN
    + """
-- KEYS: stream, meta, then per consumer its state, range starts and ranges. ARGV: the most messages kept ('' no limit),
-- the store time messages must have to stay ('' no limit).
-- Returns {the new min, then per consumer the messages this trim took that it had
-- neither settled nor held}.
local m = redis.call('HMGET', KEYS[2], 'min', 'next')
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local cut = 0
if ARGV[1] ~= '' then cut = nxt - tonumber(ARGV[1]) end
if ARGV[2] ~= '' and cut < nxt then
  cut = math.max(cut, index_at_time(KEYS[1], math.max(mn, cut), nxt, tonumber(ARGV[2])))
end
local out = {s(mn)}
if cut > nxt then cut = nxt end
local keep = mn
if cut > mn then
  keep = cut
  if cut < nxt then
    local e = redis.call('XREVRANGE', KEYS[1], s(cut) .. '-18446744073709551615', '-', 'COUNT', 1)[1]
    if e then
      local fi, c = first_of(e[1])
      if fi + c > cut then keep = fi end
    end
  end
end
if keep <= mn then
  for i = 3, #KEYS, 3 do out[#out + 1] = '0' end
  return out
end
redis.call('XTRIM', KEYS[1], 'MINID', s(keep) .. '-0')
redis.call('HSET', KEYS[2], 'min', s(keep))
out[1] = s(keep)
for i = 3, #KEYS, 3 do
  local st = redis.call('HMGET', KEYS[i], 'ack', 'cur', 'lo', 'lend')
  local lost = 0
  local ack = tonumber(st[1])
  if ack and math.max(ack, mn) < keep then
    local from = math.max(ack, mn)
    -- leased ranges cover [ack, cur): what of them is neither settled nor held is lost
    local cur = math.max(from, tonumber(st[2]) or from)
    local upto = math.min(cur, keep)
    if upto > from then
      for _, start in ipairs(redis.call('ZRANGEBYSCORE', KEYS[i + 1], '-inf', '(' .. s(upto))) do
        local f = {}
        for part in string.gmatch((redis.call('HGET', KEYS[i + 2], start) or '') .. '|', '([^|]*)|') do
          f[#f + 1] = part
        end
        local owner = f[4] or ''
        if owner == '' or owner == '!' then  -- due again or dead: nobody holds it
          local a, b = math.max(tonumber(start), from), math.min(tonumber(f[1]) or 0, upto)
          local pos = a
          for x, y in string.gmatch(f[6] or '', '(%d+)%-(%d+)') do
            x, y = tonumber(x), tonumber(y)
            if x > pos and pos < b then lost = lost + math.min(x, b) - pos end
            if y > pos then pos = y end
          end
          if pos < b then lost = lost + b - pos end
        end
      end
    end
    -- beyond the cursor: never handed, unless a pull consumer holds it locked
    local at = cur
    if st[3] then at = math.max(at, tonumber(st[4]) or at) end
    if at < keep then lost = lost + keep - at end
  end
  out[#out + 1] = s(lost)
end
return out
"""
)


Progresses = Mapping[str, Sequence[str | None]]
"""Per consumer group (app) of a topic, the clients whose progress is its (None: the
group's own)."""


@dataclass(frozen=True, slots=True)
class Trimmed:
    """What retention did to one topic: the min index of each partition after, and the
    messages it took from each app before that app read them (a broadcast consumer's or
    fan-out queue's worst client's), summed over the partitions."""

    mins: dict[int, int]
    lost: dict[str, int]


async def trim_topics(
    client: AnyRedis, topics: Sequence[tuple[TopicInfo, Progresses]], now_ms: int
) -> list[Trimmed]:
    """Apply each topic's retention to every one of its partitions, measuring the losses
    of the consumers in its ``Progresses``: one script call per partition,
    ``TRIM_CHUNK`` of them per pipelined round trip whatever the number of topics."""
    calls: list[tuple[tuple[str, ...], tuple[str | int, ...]]] = []
    owners: list[list[tuple[str, str]]] = []
    for info, progresses in topics:
        mine = [(app, consumer_id(app, c)) for app, clients in progresses.items() for c in clients]
        owners.append(mine)
        count = "" if info.retention_max_count is None else info.retention_max_count
        before = (
            "" if info.retention_max_age_s is None else now_ms - info.retention_max_age_s * 1000
        )
        for p in range(info.partitions):
            keys = PartitionKeys(info.code, p)
            calls.append(
                (
                    (
                        keys.stream,
                        keys.meta,
                        *(
                            k
                            for _, c in mine
                            for k in (keys.state(c), keys.range_starts(c), keys.ranges(c))
                        ),
                    ),
                    (count, before),
                )
            )
    replies: list[list[bytes]] = []
    for at in range(0, len(calls), TRIM_CHUNK):
        replies += await run_pipelined(client, TRIM, calls[at : at + TRIM_CHUNK])
    out: list[Trimmed] = []
    it = iter(replies)
    for (info, _), mine in zip(topics, owners, strict=True):
        done = Trimmed({}, {})
        for p in range(info.partitions):
            reply = next(it)
            done.mins[p] = int(reply[0])
            worst: dict[str, int] = {}
            for (app, _), n in zip(mine, reply[1:], strict=True):
                worst[app] = max(worst.get(app, 0), int(n))
            for app, n in worst.items():
                if n > 0:
                    done.lost[app] = done.lost.get(app, 0) + n
        out.append(done)
    return out


async def record_losses(client: AnyRedis, losses: Mapping[tuple[str, str], int]) -> None:
    """Add ``losses`` (per ``(topic, app)``) to the unsettled ones."""
    if not losses:
        return
    pipe = client.pipeline(transaction=False)
    for (topic, app), n in losses.items():
        pipe.hincrby(LOSSES, f"{topic}|{app}", n)
    await pipe.execute()


async def unsettled_losses(client: AnyRedis) -> dict[tuple[str, str], int]:
    """The losses recorded and not settled, per ``(topic, app)``."""
    out: dict[tuple[str, str], int] = {}
    for field, n in (await client.hgetall(LOSSES)).items():
        topic, _, app = field.decode().partition("|")
        if int(n) > 0:
            out[(topic, app)] = int(n)
    return out


SETTLE = Script(
    """
-- KEYS: the losses hash. ARGV: field, count pairs: each count is taken off its field,
-- and a field left at 0 or less goes (what was recorded meanwhile stays).
for i = 1, #ARGV, 2 do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], -tonumber(ARGV[i + 1])) <= 0 then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return 0
"""
)


async def settle_losses(client: AnyRedis, losses: Mapping[tuple[str, str], int]) -> None:
    """Take ``losses`` (as :func:`unsettled_losses` read them, or part of them) off the
    unsettled ones: what was recorded since stays for the next reader."""
    if losses:
        args: list[str | int] = [v for (t, a), n in losses.items() for v in (f"{t}|{a}", n)]
        await SETTLE(client, (LOSSES,), args)
