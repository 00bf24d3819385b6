"""Reading a partition: bounds, index ranges, and index-by-store-time.

A stream entry holds the records of one append call and its id is ``<first index>-<indexes
taken>``, so the entry holding index ``i`` is the last entry with id ≤ ``i-<max>``
(XREVRANGE … COUNT 1) and a range read is that entry plus XRANGE from ``i+1`` —
O(log n + k) whatever the backlog. Records of an entry before ``i`` are skipped; a batch
is returned whole even when the range starts inside it (the reader expands items).
:func:`read_entries` returns the entries whole instead (bulk readers split them).
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Sequence

from brokers.engine.errors import IndexOutOfRange, InvalidMessage
from brokers.engine.keys import PartitionKeys
from brokers.engine.model import Delivery, StoredEntry
from brokers.engine.record import FIXED_SIZE, record_count
from brokers.engine.redisio import AnyRedis, Script, run_pipelined

# Lua: append records covering [start, ...) to `out` (flat: index, count, record) until
# at least `want` items; returns the items added and, when a record stored after
# `max_store` stopped the read, that record's store time. A stream entry holds one
# append call: one or more records, each starting with its size (JMQ4 layout).
PULL_READ_BYTES = 16 * 1024 * 1024
"""The most record bytes one consumer's fetch or lease reads (at least one record): a
batch of large messages — up to the engine's body limit each, whatever protocol stored
them — is not read out of Redis, and handed to one consumer, as one reply of hundreds of
MiB. What is not read stays for the next fetch (the lock or lease covers what was read)."""

READ_FN = (
    f"local PULL_READ_BYTES = {PULL_READ_BYTES}\n"
    + """
local function rec_count(v, pos)
  if math.floor(struct.unpack('>i2', v, pos + 20) / 4096) % 2 == 1 then
    local c = struct.unpack('>i2', v, pos + 59)
    if c < 1 then c = 1 end
    return c
  end
  return 1
end
-- each_entry: take(e) on the stream entries covering `start` onwards until taken() reaches
-- `want`, asking XRANGE for as many entries as the last entry's size says are still
-- needed; returns what take returned when it stopped the walk (a blocked store time).
-- With take_run, each XRANGE reply is first offered whole (with the index its last entry
-- ends at): when take_run takes it, its entries are not walked one by one.
local function each_entry(stream, start, want, take, taken, take_run)
  local head = redis.call('XREVRANGE', stream, s(start) .. '-18446744073709551615', '-', 'COUNT', 1)
  local per = 1  -- items per entry, as the last entry read had
  if head[1] then
    local blocked = take(head[1])
    if blocked then return blocked end
    local _, c = first_of(head[1][1])
    per = c
  end
  local from = start + 1
  while taken() < want do
    local n = math.ceil((want - taken()) / per)
    if n > 16 then n = 16 end
    local rest = redis.call('XRANGE', stream, s(from) .. '-0', '+', 'COUNT', n)
    if not rest[1] then break end
    local last, lc = first_of(rest[#rest][1])
    if take_run and take_run(rest, last + lc) then
      from, per = last + lc, lc
    else
      for _, e in ipairs(rest) do
        local blocked = take(e)
        if blocked then return blocked end
        if taken() >= want then break end
        local fi, c = first_of(e[1])
        from = fi + c
        per = c
      end
    end
  end
  return nil
end
-- open_entry(e, start, max_store): an entry's first index, index count and records; nothing
-- when it ends before `start`, and (nil, nil, nil, its store time) when it was stored after
-- `max_store` (a consumer delay holds it back).
local function open_entry(e, start, max_store)
  local fi, c = first_of(e[1])
  if fi + c <= start then return nil end
  local v = e[2][2]
  if max_store then
    local st = struct.unpack('>i8', v, 40) + struct.unpack('>i4', v, 48)
    if st > max_store then return nil, nil, nil, st end
  end
  return fi, c, v
end
-- `cap` (bytes, or nil): a read that holds records already stops before the record that
-- would take it past `cap` (a pull of many large messages is not one huge reply).
local function read_from(stream, start, want, out, max_store, cap)
  local items, bytes, full = 0, 0, false
  local function fits(n)
    if cap and items > 0 and bytes + n > cap then full = true; return false end
    bytes = bytes + n
    return true
  end
  local function take(e)
    local fi, c, v, blocked = open_entry(e, start, max_store)
    if not fi then return blocked end
    local size = struct.unpack('>i4', v, 1)
    if size == #v then
      if not fits(#v) then return nil end
      out[#out + 1] = s(fi); out[#out + 1] = s(c); out[#out + 1] = v
      items = items + c
      return nil
    end
    local pos, idx = 1, fi
    while pos <= #v and items < want do
      size = struct.unpack('>i4', v, pos)
      local rc = rec_count(v, pos)
      if idx + rc > start then
        if not fits(size) then return nil end
        out[#out + 1] = s(idx); out[#out + 1] = s(rc); out[#out + 1] = string.sub(v, pos, pos + size - 1)
        items = items + rc
      end
      idx = idx + rc
      pos = pos + size
    end
    return nil
  end
  local function taken() if full then return want end return items end
  local blocked = each_entry(stream, start, want, take, taken)
  -- items as counted once the walk is done; full when the cap stopped it
  return items, blocked, full
end
-- read_span: read_from's records, but the records taken from consecutive entries go out as
-- ONE triple (first index, items, the records back to back): a fetch costs one reply
-- string instead of one per record, in the script and on the wire (:func:`parse_spans`
-- splits them). Entries' indexes are dense, so what is taken is always one run.
local function read_span(stream, start, want, out, max_store, cap)
  local items, buf, first, bytes, full = 0, {}, nil, 0, false
  local function fits(n, more)
    if cap and (items > 0 or more) and bytes + n > cap then full = true; return false end
    bytes = bytes + n
    return true
  end
  local function take(e)
    local fi, c, v, blocked = open_entry(e, start, max_store)
    if not fi then return blocked end
    -- a whole entry within the cap goes as it is; else record by record, so an entry of
    -- several records (one append call) is cut at the cap too
    if fi >= start and items + c <= want and (not cap or bytes + #v <= cap) then
      bytes = bytes + #v
      if not first then first = fi end
      buf[#buf + 1] = v
      items = items + c
      return nil
    end
    local pos, idx, first_pos, n = 1, fi, nil, 0
    while pos <= #v and items + n < want do
      local size = struct.unpack('>i4', v, pos)
      local rc = rec_count(v, pos)
      if idx + rc > start then
        if not fits(size, n > 0) then break end
        if not first_pos then
          first_pos = pos
          if not first then first = idx end
        end
        n = n + rc
      end
      idx = idx + rc
      pos = pos + size
    end
    if first_pos then
      buf[#buf + 1] = string.sub(v, first_pos, pos - 1)
      items = items + n
    end
    return nil
  end
  -- A whole XRANGE reply at once, when no consumer delay applies, it starts at `start` or
  -- later and all of it fits: indexes are dense, so it holds run_end minus its first
  -- index, and its entries need not be opened one by one (a fetch of single-message
  -- entries spent most of its time there).
  local function take_run(rest, run_end)
    if max_store then return false end
    local fi = first_of(rest[1][1])
    if fi < start or items + run_end - fi > want then return false end
    if cap then  -- all of it within the cap, or entry by entry
      local n = 0
      for i = 1, #rest do n = n + #rest[i][2][2] end
      if bytes + n > cap then return false end
      bytes = bytes + n
    end
    if not first then first = fi end
    for i = 1, #rest do buf[#buf + 1] = rest[i][2][2] end
    items = items + run_end - fi
    return true
  end
  local function done(blocked)
    if first then
      out[#out + 1] = s(first); out[#out + 1] = s(items)
      -- one piece goes out as it is: concatenating copies it again (a fifth of a fetch
      -- of one batch entry)
      if #buf == 1 then out[#out + 1] = buf[1] else out[#out + 1] = table.concat(buf) end
    end
    return items, blocked
  end
  local function taken() if full then return want end return items end
  return done(each_entry(stream, start, want, take, taken, take_run))
end
"""
)

READ = Script(
    READ_FN
    + """
-- KEYS: stream, meta. ARGV: start, want. Returns {min, next, ok, flat entries...}: at most
-- PULL_READ_BYTES of records (at least one)
local m = redis.call('HMGET', KEYS[2], 'min', 'next')
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local start = tonumber(ARGV[1])
local out = {s(mn), s(nxt), 1}
if start < mn or start > nxt then out[3] = 0; return out end
if start < nxt then read_span(KEYS[1], start, tonumber(ARGV[2]), out, nil, PULL_READ_BYTES) end
return out
"""
)

FIND_TIME_FN = """
-- index_at_time(stream, lo, hi, ts): the first index in [lo, hi) whose store time is at or
-- after ts (hi when none): a binary search over the stream's entries.
local function index_at_time(stream, lo, hi, ts)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local e = redis.call('XREVRANGE', stream, s(mid) .. '-18446744073709551615', '-', 'COUNT', 1)[1]
    if not e then hi = mid else
      local fi, c = first_of(e[1])
      local rec = e[2][2]
      local st = struct.unpack('>i8', rec, 40) + struct.unpack('>i4', rec, 48)
      if st >= ts then hi = fi else lo = fi + c end
    end
  end
  return lo
end
"""

FIND_TIME = Script(
    FIND_TIME_FN
    + """
-- KEYS: stream, meta. ARGV: timestamp ms. First index whose store time >= ts.
local m = redis.call('HMGET', KEYS[2], 'min', 'next')
return s(index_at_time(KEYS[1], tonumber(m[1] or '0'), tonumber(m[2] or '0'), tonumber(ARGV[1])))
"""
)


ENTRIES = Script(
    f"local PULL_READ_BYTES = {PULL_READ_BYTES}\n"
    + """
-- KEYS: stream, meta. ARGV: start, want. Returns {min, next, ok, then first, count, records
-- of each whole entry}: the entries covering [start, ...) until `want` indexes from start
-- (the first entry may begin before start), or PULL_READ_BYTES of them (at least one
-- entry). No record is split out, so Redis does one reply element per append call, not
-- per message.
local m = redis.call('HMGET', KEYS[2], 'min', 'next')
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local start, want = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {s(mn), s(nxt), 1}
if start < mn or start > nxt then out[3] = 0; return out end
if start == nxt then return out end
local items, from, bytes = 0, start, 0
local head = redis.call('XREVRANGE', KEYS[1], s(start) .. '-18446744073709551615', '-', 'COUNT', 1)
if head[1] then
  local fi, c = first_of(head[1][1])
  if fi + c > start then
    out[#out + 1] = s(fi); out[#out + 1] = s(c); out[#out + 1] = head[1][2][2]
    items, from, bytes = fi + c - start, fi + c, #head[1][2][2]
  end
end
while items < want and bytes < PULL_READ_BYTES do
  local rest = redis.call('XRANGE', KEYS[1], s(from) .. '-0', '+', 'COUNT', 16)
  if not rest[1] then break end
  for _, e in ipairs(rest) do
    local fi, c = first_of(e[1])
    local v = e[2][2]
    if items > 0 and bytes + #v > PULL_READ_BYTES then bytes = PULL_READ_BYTES; break end
    out[#out + 1] = s(fi); out[#out + 1] = s(c); out[#out + 1] = v
    items, from, bytes = items + c, fi + c, bytes + #v
    if items >= want then break end
  end
end
return out
"""
)


def parse_entries(partition: int, flat: list, offset: int = 0) -> list[Delivery]:
    """Turn a script's flat ``first, count, record`` triples into deliveries."""
    return [
        Delivery(partition, int(flat[i]), int(flat[i + 1]), flat[i + 2])
        for i in range(offset, len(flat), 3)
    ]


_SIZE = struct.Struct(">i")


def parse_spans(
    partition: int, flat: Sequence, offset: int = 0, *, attempts: int = 0
) -> list[Delivery]:
    """Turn ``read_span``'s flat ``first, items, records`` triples into one delivery per
    record (a batch record is one delivery of its items, as stored); ``read_from``'s
    one-record triples pass through as they are."""
    out: list[Delivery] = []
    append = out.append
    unpack = _SIZE.unpack_from
    for i in range(offset, len(flat), 3):
        index, span = int(flat[i]), flat[i + 2]
        end = len(span)
        (size,) = unpack(span, 0)
        if size == end:  # one record
            append(Delivery(partition, index, int(flat[i + 1]), span, None, attempts))
            continue
        pos = 0
        while pos < end:
            (size,) = unpack(span, pos)
            after = pos + size
            if size < FIXED_SIZE or after > end:
                raise InvalidMessage("record size disagrees with its content")
            # a batch record (sysCode bit 12, in the high byte at +20) takes its items;
            # positional arguments: this runs per message read
            if span[pos + 20] & 0x10:
                count = record_count(span, pos)
                append(Delivery(partition, index, count, span[pos:after], None, attempts))
                index += count
            else:
                append(Delivery(partition, index, 1, span[pos:after], None, attempts))
                index += 1
            pos = after
    return out


async def bounds(client: AnyRedis, topic: str, partition: int) -> tuple[int, int]:
    """(min index, next index) of a partition; (0, 0) for one never written."""
    lo, hi = await client.hmget(PartitionKeys(topic, partition).meta, "min", "next")
    return int(lo or 0), int(hi or 0)


async def read_range(
    client: AnyRedis, topic: str, partition: int, start: int, count: int
) -> list[Delivery]:
    """Records covering ``start`` onwards, at least ``count`` items unless the end is hit
    or they reach :data:`PULL_READ_BYTES` (at least one record is read): a caller that
    wants a range reads again from the end of what it got.

    ``start == max`` returns nothing; outside ``[min, max]`` raises IndexOutOfRange.
    """
    keys = PartitionKeys(topic, partition)
    flat = await READ(client, (keys.stream, keys.meta), (start, max(1, count)))
    if not int(flat[2]):
        raise IndexOutOfRange(start, int(flat[0]), int(flat[1]))
    return parse_spans(partition, flat, 3)


async def read_chunks(
    client: AnyRedis, topic: str, partition: int, first: int, end: int
) -> AsyncIterator[list[Delivery]]:
    """The records of ``[first, end)`` still stored, one capped :func:`read_range` at a
    time (each read from where the last one's records end; a batch record crossing
    ``end`` whole): a range of large messages is never held whole. It stops where
    retention took what was not read yet."""
    pos = first
    while pos < end:
        try:
            got = await read_range(client, topic, partition, pos, end - pos)
        except IndexOutOfRange:  # below the partition's min: trimmed by retention
            return
        got = [d for d in got if d.index < end and d.end > pos]
        if not got:
            return
        yield got
        pos = got[-1].end


async def read_entries(
    client: AnyRedis, topic: str, partition: int, start: int, count: int
) -> list[StoredEntry]:
    """Whole stream entries covering ``start`` onwards, at least ``count`` indexes unless
    the end is hit or they reach :data:`PULL_READ_BYTES` (at least one entry); ``start ==
    max`` returns nothing, outside ``[min, max]`` raises
    IndexOutOfRange."""
    keys = PartitionKeys(topic, partition)
    flat = await ENTRIES(client, (keys.stream, keys.meta), (start, max(1, count)))
    if not int(flat[2]):
        raise IndexOutOfRange(start, int(flat[0]), int(flat[1]))
    return [
        StoredEntry(int(flat[i]), int(flat[i + 1]), flat[i + 2]) for i in range(3, len(flat), 3)
    ]


async def index_at_time(client: AnyRedis, topic: str, partition: int, timestamp_ms: int) -> int:
    """First index whose store time is ≥ ``timestamp_ms`` (max index if none)."""
    keys = PartitionKeys(topic, partition)
    return int(await FIND_TIME(client, (keys.stream, keys.meta), (timestamp_ms,)))


async def indexes_at_times(
    client: AnyRedis, topic: str, partitions: Sequence[int], times_ms: Sequence[int]
) -> list[list[int]]:
    """:func:`index_at_time` of each partition for each of ``times_ms``, in ONE pipelined
    round trip whatever the number of partitions: per partition, its indexes in the order
    of ``times_ms``."""
    calls = []
    for p in partitions:
        keys = PartitionKeys(topic, p)
        calls += [((keys.stream, keys.meta), (t,)) for t in times_ms]
    flat = [int(x) for x in await run_pipelined(client, FIND_TIME, calls)]
    n = len(times_ms)
    return [flat[i : i + n] for i in range(0, len(flat), n)]
