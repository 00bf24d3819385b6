"""Shared delivery of a consumer group on one partition: cursor, in-flight ranges, ack index.

Streaming and competing consumers (zbus MQ sessions, VibeMQ subscribers) lease batches
of one partition concurrently; each lease is ONE *range* ``[start, end)`` of indexes with
an owner, a deadline, its failed attempts so far (``attempt``: the retry limit and the
backoff count these), how often it was delivered (``deliveries``: what consumers are told)
and the sub-runs already settled inside it (``covered``). Per (partition, consumer id), under the partition's hash tag:

* ``state`` hash (shared with the pull consumers of :mod:`.consume`): ``cur`` — the
  delivery cursor, the next index never leased; ``ack`` — the ack index: everything
  below it is settled, kept as ``min(cur, first unsettled index of the lowest range)``;
  ``t`` / ``ip`` — last access and address.
* ``rs`` zset (range start → start), ``rd`` zset (range start → deadline or due time)
  and ``rh`` hash (start → ``end|attempt|deadline|owner|flag|covered|deliveries``; a range
  written before ``deliveries`` existed lacks it and is read as delivered ``attempt`` times,
  one fewer when never delivered).

A range is *leased* (owner set, deadline = lease expiry) or *due* (owner empty: waiting to
be delivered again at its due time; ``flag`` ``r`` when it was released rather than
failed, so its next delivery is marked redelivered and counted as a delivery, not as a
failed attempt; ``n`` when it was never delivered — read ahead and handed back unseen, or
progress moved in from elsewhere) or *dead* (owner ``!``:
out of attempts, waiting for the engine to dead-letter it).

The common path is O(1) Redis commands per batch, never per message: one script leases
the next batch from the cursor (XRANGE) and records one range; one script settles a batch
of acks by covering runs in the ranges that hold them, dropping ranges once covered and
moving the ack index. An expired lease comes back whole (its settled part excepted) after
the backoff for its attempt, or goes dead past the attempt limit. Releasing or failing
single messages splits their range: per-message structures exist only on these exception
paths.

A partition is either pulled under an exclusive lock (JMQ4, HTTP-MQ: :mod:`.consume`) or
leased in ranges, never both at once: each side sees the other as ``LOCKED`` (the state's
``sh`` field — the earliest range deadline — tells pull consumers that ranges exist).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from brokers.engine.keys import GroupKeys, PartitionKeys, consumer_id
from brokers.engine.model import Delivery
from brokers.engine.read import READ_FN, parse_spans
from brokers.engine.redisio import AnyRedis, Script, run_pipelined

LOCKED, EMPTY, FOUND = -1, 0, 1

RANGES_FN = """
local K = {stream = KEYS[1], meta = KEYS[2], state = KEYS[3], rs = KEYS[4], rd = KEYS[5],
           rh = KEYS[6]}
local function runs_of(c)
  local out = {}
  if c and c ~= '' then
    for a, b in string.gmatch(c, '(%d+)%-(%d+)') do out[#out + 1] = {tonumber(a), tonumber(b)} end
  end
  return out
end
local function runs_str(runs)
  local parts = {}
  for i, r in ipairs(runs) do parts[i] = s(r[1]) .. '-' .. s(r[2]) end
  return table.concat(parts, ',')
end
local function add_run(runs, a, b)
  local out, placed = {}, false
  for _, r in ipairs(runs) do
    if r[2] < a then out[#out + 1] = r
    elseif r[1] > b then
      if not placed then out[#out + 1] = {a, b}; placed = true end
      out[#out + 1] = r
    else
      if r[1] < a then a = r[1] end
      if r[2] > b then b = r[2] end
    end
  end
  if not placed then out[#out + 1] = {a, b} end
  return out
end
local function clip(runs, a, b)
  local out = {}
  for _, r in ipairs(runs) do
    local x, y = math.max(r[1], a), math.min(r[2], b)
    if x < y then out[#out + 1] = {x, y} end
  end
  return out
end
local function gaps(a, b, runs)
  local out, pos = {}, a
  for _, r in ipairs(runs) do
    if r[1] > pos then out[#out + 1] = {pos, math.min(r[1], b)} end
    if r[2] > pos then pos = r[2] end
    if pos >= b then break end
  end
  if pos < b then out[#out + 1] = {pos, b} end
  return out
end
-- Ranges read or written by this call, by start (false: dropped): a range is read from
-- Redis and parsed once per call, however often the script looks at it. Every change a
-- script makes to a range it stores (put_range or drop_range) in the same call.
local seen = {}
local function get_range(start)
  local known = seen[start]
  if known ~= nil then return known or nil end
  local v = redis.call('HGET', K.rh, s(start))
  if not v then return nil end
  local f = {}
  for part in string.gmatch(v .. '|', '([^|]*)|') do f[#f + 1] = part end
  local r = {start = start, stop = tonumber(f[1]), attempt = tonumber(f[2]),
             deadline = tonumber(f[3]), owner = f[4], flag = f[5], covered = runs_of(f[6])}
  -- `deliveries` came later: before it, a range's next delivery was numbered by `attempt`
  if f[7] then r.deliveries = tonumber(f[7])
  elseif r.flag == 'n' then r.deliveries = r.attempt - 1
  else r.deliveries = r.attempt end
  r.due_stored = r.deadline  -- what the `rd` zset holds for it
  seen[start] = r
  return r
end
-- write r; the zsets only where they change (an ack inside a range changes its hash only)
local function put_range(r)
  local key = s(r.start)
  redis.call('HSET', K.rh, key, s(r.stop) .. '|' .. s(r.attempt) .. '|' ..
    s(r.deadline) .. '|' .. r.owner .. '|' .. r.flag .. '|' .. runs_str(r.covered) .. '|' ..
    s(r.deliveries or r.attempt))
  if r.due_stored == nil then redis.call('ZADD', K.rs, r.start, key) end
  if r.due_stored ~= r.deadline then redis.call('ZADD', K.rd, r.deadline, key) end
  r.due_stored = r.deadline
  seen[r.start] = r
end
local function drop_range(start)
  local key = s(start)
  redis.call('HDEL', K.rh, key); redis.call('ZREM', K.rs, key)
  redis.call('ZREM', K.rd, key)
  local known = seen[start]
  if known then known.due_stored = nil end  -- stored again, it is a new range
  seen[start] = false
end
local function settled(r)
  local g = gaps(r.start, r.stop, r.covered)
  return #g == 0
end
-- write a changed range back; a range settled whole is gone
local function store(r)
  if settled(r) then drop_range(r.start) else put_range(r) end
end
-- split range r at index `at` (r.start < at < r.stop): r keeps [start, at), returns the rest
local function split(r, at)
  local rest = {start = at, stop = r.stop, attempt = r.attempt, deadline = r.deadline,
                owner = r.owner, flag = r.flag, covered = clip(r.covered, at, r.stop),
                deliveries = r.deliveries}
  r.stop = at; r.covered = clip(r.covered, r.start, at)
  return rest
end
local function refresh_ack(cur)
  -- pull consumers (JMQ4, HTTP-MQ) see a partition with ranges as locked until `sh`
  local nd = redis.call('ZRANGE', K.rd, 0, 0, 'WITHSCORES')
  local ack = cur
  local first = redis.call('ZRANGE', K.rs, 0, 0)[1]
  if first then
    local r = get_range(tonumber(first))
    local g = gaps(r.start, r.stop, r.covered)
    if g[1] and g[1][1] < ack then ack = g[1][1] end
  end
  -- written only when changed (most acks inside a range change neither)
  local was = redis.call('HMGET', K.state, 'sh', 'ack')
  local sa, set = s(ack), {}
  if nd[2] and was[1] ~= nd[2] then set[#set + 1] = 'sh'; set[#set + 1] = nd[2] end
  if was[2] ~= sa then set[#set + 1] = 'ack'; set[#set + 1] = sa end
  if set[1] then redis.call('HSET', K.state, unpack(set)) end
  if not nd[2] and was[1] then redis.call('HDEL', K.state, 'sh') end
  return ack
end
local function cursor()
  return tonumber(redis.call('HGET', K.state, 'cur') or '0')
end
-- the ranges overlapping [a, b), in order
local function overlapping(a, b)
  local out = {}
  local head = redis.call('ZREVRANGEBYSCORE', K.rs, s(a), '-inf', 'LIMIT', 0, 1)[1]
  if head then
    local r = get_range(tonumber(head))
    if r.stop > a then out[#out + 1] = r end
  end
  for _, st in ipairs(redis.call('ZRANGEBYSCORE', K.rs, '(' .. s(a), '(' .. s(b))) do
    out[#out + 1] = get_range(tonumber(st))
  end
  return out
end
local function backoff(attempt, base, cap)
  if base <= 0 then return 0 end
  local d = base * (2 ^ (attempt - 1))
  if d > cap then d = cap end
  return d
end
"""

# A caught-up consumer asking again (a parked long poll, an idle pump's recheck, or every
# process but one woken by the same produce) is the most frequent lease: it is answered
# before the lease script defines its helpers, from three reads, and writes only the
# consumer's last access, at most once a second (or when its address changed).
IDLE_LEASE_FN = """
local lease_state = redis.call('HMGET', KEYS[3], 'ack', 'cur', 'le', 't', 'ip')
local lease_meta = redis.call('HMGET', KEYS[2], 'min', 'next')
do
  local now = tonumber(ARGV[1])
  local st = lease_state
  local cur, le = tonumber(st[2]), tonumber(st[3])
  if le and le > now then return {-1, s(le)} end
  if cur and cur >= tonumber(lease_meta[2] or '0') then
    local nd = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
    local due = tonumber(nd[2])
    if not due or due > now then
      local addr = ARGV[6]
      if addr ~= '' and addr ~= st[5] then
        redis.call('HSET', KEYS[3], 't', s(now), 'ip', addr)
      elseif now - (tonumber(st[4]) or 0) >= 1000 then
        redis.call('HSET', KEYS[3], 't', s(now))
      end
      return {0, s(due or 0), 1, 0, 0, 0, 0}
    end
  end
end
"""

LEASE = Script(
    IDLE_LEASE_FN
    + READ_FN
    + RANGES_FN
    + """
-- ARGV: now, want, lease_ms, owner, init, address, max_store ('' none), max_retry (-1 none),
-- ttl_ms (0 none), backoff base, backoff cap, member ('1': a fan-out member, which moves
-- the partition's dispatch mark `fan` — where the next member to join starts)
-- Returns {status, hint, attempt, redelivered, n_live, n_expired, n_dead, live triples...,
-- expired triples..., dead range starts..., leased runs as start, end pairs...}; status -1 LOCKED (hint = lock expiry), 0 EMPTY
-- (hint = when something may be due, 0 none), 1 FOUND (hint = `now` when more is
-- servable at once, else as for EMPTY).
local now, want, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local owner, init, addr = ARGV[4], ARGV[5], ARGV[6]
local max_store = nil
if ARGV[7] ~= '' then max_store = tonumber(ARGV[7]) end
local maxr, ttl = tonumber(ARGV[8]), tonumber(ARGV[9])
local base, cap = tonumber(ARGV[10]), tonumber(ARGV[11])
local st = lease_state  -- read by the idle check above: 'ack', 'cur', 'le'
if addr ~= '' then redis.call('HSET', K.state, 't', s(now), 'ip', addr)
else redis.call('HSET', K.state, 't', s(now)) end
local m = lease_meta  -- 'min', 'next'
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local cur = tonumber(st[2])
if not cur then
  cur = tonumber(st[1])
  if not cur then
    if init == 'latest' then cur = nxt else cur = mn end
  end
  redis.call('HSET', K.state, 'cur', s(cur))
end
if redis.call('ZCARD', K.rs) == 0 then
  local a = tonumber(st[1])
  if a and a > cur then cur = a end
end
if cur < mn then cur = mn end
-- expired leases come back after their backoff, or go dead; due ranges are candidates
local dead, candidate = {}, nil
for _, rst in ipairs(redis.call('ZRANGEBYSCORE', K.rd, '-inf', s(now), 'LIMIT', 0, 32)) do
  local r = get_range(tonumber(rst))
  if r.owner == '!' then
    dead[#dead + 1] = s(r.start)
  elseif r.owner ~= '' then
    if maxr >= 0 and r.attempt > maxr then
      r.owner = '!'; r.deadline = now; put_range(r); dead[#dead + 1] = s(r.start)
    else
      r.owner = ''; r.flag = '0'; r.deadline = now + backoff(r.attempt, base, cap)
      put_range(r)
      if r.deadline <= now and not candidate then candidate = r end
    end
  elseif not candidate then
    candidate = r
  end
end
local live, expired = {}, {}
local attempt, redelivered = 1, 0
local function keep(idx, c, rec, r)
  if ttl > 0 then
    local stored = struct.unpack('>i8', rec, 40) + struct.unpack('>i4', rec, 48)
    if stored + ttl <= now then
      expired[#expired + 1] = s(idx); expired[#expired + 1] = s(c); expired[#expired + 1] = rec
      r.covered = add_run(r.covered, idx, idx + c)
      return
    end
  end
  live[#live + 1] = s(idx); live[#live + 1] = s(c); live[#live + 1] = rec
end
local blocked = nil
local leased = {}  -- the runs [start, end) this lease hands out (a due range may start
                   -- or have gaps inside a batch record: its readers deliver those items)
while candidate and #live == 0 do
  -- a due range: its unsettled records, up to `want` items or PULL_READ_BYTES of them (at
  -- least one record); the rest stays due
  local r = candidate
  local out, items, last, bytes, full = {}, 0, r.start, 0, false
  local runs = {}
  for _, g in ipairs(gaps(r.start, r.stop, r.covered)) do
    if items >= want or full then break end
    local part = {}
    local _, _, capped = read_from(K.stream, g[1], math.min(want - items, g[2] - g[1]), part,
                                   nil, PULL_READ_BYTES - bytes)
    if capped then full = true end
    for i = 1, #part, 3 do
      local idx, c = tonumber(part[i]), tonumber(part[i + 1])
      if idx >= g[2] or items >= want then break end
      if idx + c > g[1] then
        local size = #part[i + 2]
        if items > 0 and bytes + size > PULL_READ_BYTES then full = true; break end
        out[#out + 1] = {idx, c, part[i + 2]}
        items = items + c; last = idx + c; bytes = bytes + size
      end
    end
    if last > g[1] then runs[#runs + 1] = {g[1], math.min(g[2], last)} end
  end
  if (items >= want or full) and last < r.stop then
    store(split(r, last))
  end
  candidate = nil
  if #out == 0 then  -- its records are gone (retention): nothing to redeliver
    drop_range(r.start)
    local nd = redis.call('ZRANGEBYSCORE', K.rd, '-inf', s(now), 'LIMIT', 0, 1)[1]
    if nd then
      local c = get_range(tonumber(nd))
      if c.owner == '' then candidate = c end
    end
  else
    -- every lease is a delivery; only one after a failure ('0') is a new attempt
    if r.flag == 'r' then redelivered = 1
    elseif r.flag == 'n' then redelivered = 0  -- never delivered
    else redelivered = 1; r.attempt = r.attempt + 1 end
    r.deliveries = r.deliveries + 1
    attempt = r.deliveries
    r.owner = owner; r.flag = '0'; r.deadline = now + lease
    for _, e in ipairs(out) do keep(e[1], e[2], e[3], r) end
    store(r)
    for _, g in ipairs(runs) do leased[#leased + 1] = s(g[1]); leased[#leased + 1] = s(g[2]) end
  end
end
if #live == 0 then
  -- the next batch from the cursor (a range wholly expired by TTL is settled at once)
  for _ = 1, 4 do
    if cur >= nxt or #live > 0 then break end
    local part = {}
    local items
    if ttl > 0 then  -- TTL looks at each record: one triple per record
      items, blocked = read_from(K.stream, cur, want, part, max_store, PULL_READ_BYTES)
    else  -- a run of records as one string (parse_spans splits it)
      items, blocked = read_span(K.stream, cur, want, part, max_store, PULL_READ_BYTES)
    end
    if items == 0 then break end
    local stop = tonumber(part[#part - 2]) + tonumber(part[#part - 1])
    local r = {start = cur, stop = stop, attempt = 1, deadline = now + lease, owner = owner,
               flag = '0', covered = {}, deliveries = 1}
    for i = 1, #part, 3 do keep(tonumber(part[i]), tonumber(part[i + 1]), part[i + 2], r) end
    store(r)
    leased[#leased + 1] = s(cur); leased[#leased + 1] = s(stop)
    cur = stop
    redis.call('HSET', K.state, 'cur', s(cur))
    if ARGV[12] == '1' and cur > tonumber(redis.call('HGET', K.meta, 'fan') or '0') then
      redis.call('HSET', K.meta, 'fan', s(cur))
    end
    if blocked then break end
  end
end
refresh_ack(cur)
-- the hint: when something (more) may be due, 0 nothing known; after a FOUND lease `now`
-- when more is servable at once (records past the cursor, a range due): the consumer
-- leases again at once, or else waits for a notification instead of an empty lease
local hint = 0
if #live > 0 and cur < nxt and not blocked then
  hint = now
else
  local nd = redis.call('ZRANGE', K.rd, 0, 0, 'WITHSCORES')
  if nd[2] then hint = tonumber(nd[2]) end
  if #live > 0 and hint > 0 and hint < now then hint = now end
  if blocked and (hint == 0 or blocked < hint) then hint = blocked end
end
local status = 0
if #live > 0 then status = 1 end
local res = {status, s(hint), attempt, redelivered, #live, #expired, #dead}
for _, v in ipairs(live) do res[#res + 1] = v end
for _, v in ipairs(expired) do res[#res + 1] = v end
for _, v in ipairs(dead) do res[#res + 1] = v end
for _, v in ipairs(leased) do res[#res + 1] = v end
return res
"""
)

SETTLE = Script(
    RANGES_FN
    + """
-- ARGV: mode ('ack' | 'release' | 'unread' | 'fail' | 'keep' | 'drop'), now, backoff
-- base, backoff cap, max_retry (-1 none), lease_ms, owner, keep_until (0: none), then runs
-- as start, end pairs.
-- ack: the runs are settled; release: back to be delivered again at once (not an
-- attempt); unread: the same, for leased messages no consumer was handed (that lease is
-- not counted as a delivery, and marked redelivered only if delivered before); fail:
-- again after the backoff of their attempt, or dead past max_retry; keep: a failed
-- attempt whose retry goes to the same lessee — still `owner`'s and unexpired, it stays
-- leased to it, counted as the next attempt and delivery, until the backoff plus
-- lease_ms (or dead past max_retry) — unless the retry would be due at keep_until or
-- later (its message's TTL is over by then: it lapses, and expires as any lease does);
-- drop: a dead range was dead-lettered.
-- Runs outside every range are settled already and ignored. Returns {ack index, settled,
-- when a kept retry is due (0: none kept), dead starts...}.
local mode, now = ARGV[1], tonumber(ARGV[2])
local base, cap, maxr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local lease_ms, keeper, keep_until = tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8])
local count, dead, kept_due = 0, {}, 0
local function covered_len(runs)
  local n = 0
  for _, r in ipairs(runs) do n = n + r[2] - r[1] end
  return n
end
-- Every run first, gathered per range touched; then each range is changed and written
-- once. Acks or releases of interleaved messages (competing sessions, a consumer acking
-- out of order) are many runs in one range: changing the range run by run rewrote it,
-- with all its covered runs, once per run — O(runs²) Lua string work (64 runs: 2.5-5 ms
-- of Redis's one thread).
local touched, order, last = {}, {}, nil
for i = 9, #ARGV, 2 do
  local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  local found
  if last and last.start <= a and b <= last.stop then found = {last}  -- ranges are disjoint
  else found = overlapping(a, b) end
  for _, r in ipairs(found) do
    local t = touched[r.start]
    if not t then
      t = {r = r, runs = {}}
      touched[r.start] = t
      order[#order + 1] = t
    end
    t.runs[#t.runs + 1] = {math.max(a, r.start), math.min(b, r.stop)}
    last = r
  end
end
local function by_start(p, q) return p[1] < q[1] end
-- clip(runs, a, b) from runs[j] on, for windows [a, b) taken in order: the clipped runs and
-- the first run ending after a (where the next window's walk starts)
local function clip_at(runs, j, a, b)
  while runs[j] and runs[j][2] <= a do j = j + 1 end
  local out, k = {}, j
  while runs[k] and runs[k][1] < b do
    local x, y = math.max(runs[k][1], a), math.min(runs[k][2], b)
    if x < y then out[#out + 1] = {x, y} end
    k = k + 1
  end
  return out, j
end
-- ack / drop: the runs are covered
local function cover(r, runs)
  local before, all = covered_len(r.covered), r.covered
  for _, run in ipairs(runs) do all[#all + 1] = run end
  table.sort(all, by_start)
  local merged = {}
  for _, run in ipairs(all) do
    local m = merged[#merged]
    if m and run[1] <= m[2] then
      if run[2] > m[2] then m[2] = run[2] end
    else
      merged[#merged + 1] = {run[1], run[2]}
    end
  end
  r.covered = merged
  count = count + covered_len(merged) - before
  store(r)
end
-- release / unread / fail: the runs of a leased range become ranges of their own, due
-- again (or dead); the rest keeps its lease. Pieces wholly settled between two runs join
-- them (one range, its settled part covered), pieces wholly settled elsewhere go.
local function give_back(r, runs)
  if r.owner == '' or r.owner == '!' then return end
  if mode == 'keep' then
    if r.owner ~= keeper or r.deadline <= now then return end
    if keep_until > 0 and now + backoff(r.attempt, base, cap) >= keep_until then return end
  end
  table.sort(runs, by_start)
  local pieces, pos = {}, r.start  -- {start, stop, given back}
  for _, run in ipairs(runs) do
    local x, y = math.max(run[1], pos), run[2]
    if y > x then
      if x > pos then pieces[#pieces + 1] = {pos, x, false} end
      pieces[#pieces + 1] = {x, y, true}
      pos = y
    end
  end
  if pos < r.stop then pieces[#pieces + 1] = {pos, r.stop, false} end
  local was = {attempt = r.attempt, deadline = r.deadline, owner = r.owner, flag = r.flag,
               deliveries = r.deliveries}
  local all = r.covered  -- sorted, disjoint, not adjacent: a settled piece lies in one run
  local out, j = {}, 1  -- {start, stop, given back, items given back}
  for _, p in ipairs(pieces) do
    local part
    part, j = clip_at(all, j, p[1], p[2])
    local done = #part == 1 and part[1][1] == p[1] and part[1][2] == p[2]
    local prev = out[#out]
    if p[3] and not done then
      if prev and prev[3] and prev.open then  -- joins the given-back range before it
        prev[2] = p[2]; prev.n = prev.n + p[2] - p[1]; prev.settled_tail = nil
      else
        out[#out + 1] = {p[1], p[2], true, n = p[2] - p[1], open = true}
      end
    elseif done then
      if prev and prev[3] and prev.open then  -- may join it, if another run follows
        prev.settled_tail = prev.settled_tail or prev[2]
        prev[2] = p[2]
      end
    else
      if prev and prev.settled_tail then prev[2] = prev.settled_tail; prev.settled_tail = nil end
      if prev then prev.open = false end
      out[#out + 1] = {p[1], p[2], false}
    end
  end
  local tail = out[#out]
  if tail and tail.settled_tail then tail[2] = tail.settled_tail; tail.settled_tail = nil end
  local reused = false
  j = 1
  for _, o in ipairs(out) do
    local q
    if o[1] == r.start then q = r; reused = true
    else q = {start = o[1]} end
    q.stop = o[2]
    q.covered, j = clip_at(all, j, o[1], o[2])
    q.attempt, q.deliveries = was.attempt, was.deliveries
    q.owner, q.flag, q.deadline = was.owner, was.flag, was.deadline
    if o[3] then
      if mode == 'release' then
        q.owner = ''; q.flag = 'r'; q.deadline = now
      elseif mode == 'unread' then  -- handed back unseen: that lease delivered nothing
        q.owner = ''; q.deadline = now
        q.deliveries = math.max(0, q.deliveries - 1)
        if q.deliveries > 0 then q.flag = 'r' else q.flag = 'n' end
      elseif maxr >= 0 and q.attempt > maxr then
        q.owner = '!'; q.deadline = now; dead[#dead + 1] = s(q.start)
      elseif mode == 'keep' then  -- as a fail, then a lease by the same owner once due
        kept_due = now + backoff(q.attempt, base, cap)
        q.deadline = kept_due + lease_ms
        q.attempt = q.attempt + 1; q.deliveries = q.deliveries + 1
      else
        q.owner = ''; q.flag = '0'; q.deadline = now + backoff(q.attempt, base, cap)
      end
      count = count + o.n
    end
    put_range(q)
  end
  if not reused then drop_range(r.start) end
end
for _, t in ipairs(order) do
  if mode == 'ack' or mode == 'drop' then cover(t.r, t.runs) else give_back(t.r, t.runs) end
end
local ack = refresh_ack(cursor())
local res = {s(ack), count, s(kept_due)}
for _, d in ipairs(dead) do res[#res + 1] = d end
return res
"""
)

RELEASE_OWNER = Script(
    RANGES_FN
    + """
-- ARGV: owner, now, prefix (1: every owner starting with `owner`). Every range leased by
-- `owner` is due again at once (its connection, or its process, went away: not an
-- attempt, marked redelivered). A lease already past its deadline stays as it is: it
-- expired, a failed attempt, whoever looks at it first. Returns how many ranges.
local owner, now, by_prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local n = 0
for _, st in ipairs(redis.call('ZRANGE', K.rs, 0, -1)) do
  local r = get_range(tonumber(st))
  if r.deadline > now and (r.owner == owner or (by_prefix and string.sub(r.owner, 1, #owner) == owner)) then
    r.owner = ''; r.flag = 'r'; r.deadline = now; put_range(r); n = n + 1
  end
end
return n
"""
)

DEAD_RUNS = Script(
    RANGES_FN
    + """
-- ARGV: start of a dead range. Returns its unsettled runs as start, end pairs.
local r = get_range(tonumber(ARGV[1]))
if not r or r.owner ~= '!' then return {} end
local out = {}
for _, g in ipairs(gaps(r.start, r.stop, r.covered)) do out[#out + 1] = s(g[1]); out[#out + 1] = s(g[2]) end
return out
"""
)


@dataclass(frozen=True, slots=True)
class LeaseArgs:
    """How a group leases: for ``lease_ms``; a new consumer starts at ``init``
    ('earliest' | 'latest'); records stored after ``max_store_ms`` wait (delay policy);
    ``max_retry`` failed deliveries before a message is dead (None: never); ``ttl_ms``
    (None: none); failed and expired deliveries come back after ``backoff_base_ms`` ·
    2^(attempt−1), at most ``backoff_cap_ms``."""

    lease_ms: int
    init: str = "earliest"
    max_store_ms: int | None = None
    max_retry: int | None = None
    ttl_ms: int | None = None
    backoff_base_ms: int = 0
    backoff_cap_ms: int = 0
    member: bool = False
    """A fan-out member: its leases move the dispatch mark new members start from."""


@dataclass(slots=True)
class GroupLease:
    """What one lease script call returned for one partition."""

    status: int
    partition: int
    hint_ms: int = 0
    """LOCKED: the lock's expiry; EMPTY: when something may be due (0: nothing known);
    FOUND: the lease's ``now_ms`` when more is servable at once, else as for EMPTY."""
    deliveries: list[Delivery] = field(default_factory=list)
    expired: list[Delivery] = field(default_factory=list)
    """Records past their TTL: settled, to be dead-lettered or counted dropped."""
    dead: list[int] = field(default_factory=list)
    """Starts of ranges out of attempts: to be dead-lettered (:func:`dead_runs`), then
    dropped with :func:`settle` mode ``drop``."""
    runs: list[tuple[int, int]] = field(default_factory=list)
    """The index runs ``[start, end)`` leased: a live batch record may reach outside
    them (a range due again from inside it); only its items inside were handed out."""


def _keys(topic: str, partition: int, cid: str) -> tuple[str, ...]:
    k = PartitionKeys(topic, partition)
    return (k.stream, k.meta, k.state(cid), k.range_starts(cid), k.range_due(cid), k.ranges(cid))


def _triples(partition: int, flat: Sequence, offset: int, n: int, attempt: int) -> list[Delivery]:
    """The deliveries of ``n`` flat values from ``offset``: triples of one record each, or
    of a run of records (:func:`~brokers.engine.read.parse_spans` splits both)."""
    return parse_spans(partition, flat[offset : offset + n], attempts=attempt)


async def lease(
    client: AnyRedis,
    topic: str,
    partition: int,
    cid: str,
    *,
    now_ms: int,
    want: int,
    owner: str,
    address: str,
    args: LeaseArgs,
) -> GroupLease:
    """Lease the next batch of ``partition`` for consumer ``cid`` (one script call)."""
    raw = await LEASE(
        client,
        _keys(topic, partition, cid),
        (
            now_ms,
            max(1, want),
            args.lease_ms,
            owner.replace("|", "/"),
            args.init,
            address.replace("|", "/"),
            "" if args.max_store_ms is None else args.max_store_ms,
            -1 if args.max_retry is None else args.max_retry,
            args.ttl_ms or 0,
            args.backoff_base_ms,
            args.backoff_cap_ms,
            "1" if args.member else "0",
        ),
    )
    status = int(raw[0])
    if status == LOCKED:
        return GroupLease(LOCKED, partition, int(raw[1]))
    attempt, redelivered = int(raw[2]), int(raw[3])
    n_live, n_expired, n_dead = int(raw[4]), int(raw[5]), int(raw[6])
    live = _triples(partition, raw, 7, n_live, attempt)
    if redelivered:  # delivered before (a released range keeps its attempt count)
        live = [
            Delivery(d.partition, d.index, d.count, d.record, attempts=attempt, redelivered=True)
            for d in live
        ]
    expired = _triples(partition, raw, 7 + n_live, n_expired, attempt)
    at = 7 + n_live + n_expired
    dead = [int(x) for x in raw[at : at + n_dead]]
    flat = raw[at + n_dead :]
    runs = [(int(flat[i]), int(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]
    return GroupLease(status, partition, int(raw[1]), live, expired, dead, runs)


async def settle(
    client: AnyRedis,
    topic: str,
    partition: int,
    cid: str,
    runs: Sequence[tuple[int, int]],
    *,
    mode: str = "ack",
    now_ms: int,
    args: LeaseArgs | None = None,
    owner: str = "",
    keep_until: int = 0,
) -> tuple[int, int, list[int], int]:
    """Settle (``ack``), ``release``, ``fail`` or ``keep`` (for ``owner``, leased again
    for ``args.lease_ms`` after the backoff — not if that is at ``keep_until`` or later)
    runs ``[start, end)``; (ack index after, indexes affected, starts of ranges that went
    dead, when a kept retry is due — 0 when none was kept)."""
    if not runs:
        return -1, 0, [], 0
    flat: list[int] = []
    for start, end in runs:
        flat += (start, end)
    a = args or LeaseArgs(lease_ms=0)
    raw = await SETTLE(
        client,
        _keys(topic, partition, cid),
        (
            mode,
            now_ms,
            a.backoff_base_ms,
            a.backoff_cap_ms,
            -1 if a.max_retry is None else a.max_retry,
            a.lease_ms,
            owner,
            keep_until,
            *flat,
        ),
    )
    return int(raw[0]), int(raw[1]), [int(x) for x in raw[3:]], int(raw[2])


async def release_owner(
    client: AnyRedis,
    topic: str,
    partitions: Sequence[int],
    cid: str,
    owner: str,
    *,
    now_ms: int,
    prefix: bool = False,
) -> int:
    """Every range ``owner`` (with ``prefix``: every owner whose name starts with it)
    leased on ``partitions`` is due again at once; how many. One round trip."""
    args = (owner.replace("|", "/"), now_ms, 1 if prefix else 0)
    calls = [(_keys(topic, p, cid), args) for p in partitions]
    return sum(int(n) for n in await run_pipelined(client, RELEASE_OWNER, calls))


async def dead_runs(
    client: AnyRedis, topic: str, partition: int, cid: str, start: int
) -> list[tuple[int, int]]:
    """The unsettled runs of the dead range starting at ``start``."""
    flat = await DEAD_RUNS(client, _keys(topic, partition, cid), (start,))
    return [(int(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2)]


def runs_of(indexes: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted distinct indexes as ``[start, end)`` runs."""
    out: list[tuple[int, int]] = []
    for i in sorted(set(indexes)):
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


GROUP_STATS = Script(
    RANGES_FN
    + """
-- KEYS as a lease's. ARGV: now. Returns {min, next, ack, backlog, in flight, retrying, dropped}.
local now = tonumber(ARGV[1])
local m = redis.call('HMGET', K.meta, 'min', 'next', 'dropped')
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local ack = tonumber(redis.call('HGET', K.state, 'ack') or s(mn))
if ack < mn then ack = mn end
local inflight, retrying = 0, 0
for _, st in ipairs(redis.call('ZRANGE', K.rs, 0, -1)) do
  local r = get_range(tonumber(st))
  local n = 0
  for _, g in ipairs(gaps(math.max(r.start, mn), math.max(r.stop, mn), r.covered)) do n = n + g[2] - g[1] end
  if r.owner ~= '' and r.owner ~= '!' then
    if r.deadline > now then inflight = inflight + n end  -- an expired lease is due again
  elseif r.owner == '' and r.deadline > now then retrying = retrying + n end
end
return {s(mn), s(nxt), s(ack), s(math.max(0, nxt - ack)), s(inflight), s(retrying), m[3] or '0'}
"""
)

PURGE = Script(
    """
-- KEYS: stream, meta, then state, rs, rd, rh, acked of each group. Deletes the messages
-- (the indexes go on from where they were) and every group's progress.
local nxt = redis.call('HGET', KEYS[2], 'next') or '0'
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'min', nxt)
for i = 3, #KEYS, 5 do
  redis.call('DEL', KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], KEYS[i + 4])
  redis.call('HDEL', KEYS[i], 'sh', 'lo', 'lt', 'le', 'ls', 'lend')
  redis.call('HSET', KEYS[i], 'ack', nxt, 'cur', nxt)
end
return nxt
"""
)


@dataclass(frozen=True, slots=True)
class GroupStats:
    """A group's numbers on a topic, summed over partitions (see :func:`group_stats`)."""

    backlog: int = 0
    """Stored and not settled: next − ack index, per partition."""
    in_flight: int = 0
    """Leased and not settled."""
    retrying: int = 0
    """Waiting for the backoff of a failed attempt."""
    dropped: int = 0
    """Dropped by the overflow policy or expired without a DLQ (the topic's count)."""
    stored: int = 0
    """Messages stored and retained (next − min)."""

    @property
    def ready(self) -> int:
        """Waiting to be delivered now: the backlog less what is in flight or retrying."""
        return max(0, self.backlog - self.in_flight - self.retrying)

    @property
    def message_count(self) -> int:
        """Queued, not in flight (VibeMQ ``messageCount``)."""
        return self.backlog - self.in_flight


async def group_stats(
    client: AnyRedis, topic: str, partitions: Sequence[int] | range, cid: str | None, now_ms: int
) -> GroupStats:
    """:class:`GroupStats` of consumer ``cid`` (None: no group — everything stored and not
    yet handed to a fan-out member counts)."""
    backlog = inflight = retrying = dropped = stored = 0
    for p in partitions:
        if cid is None:
            lo, hi, dr, fan = await client.hmget(
                PartitionKeys(topic, p).meta, "min", "next", "dropped", "fan"
            )
            n = int(hi or 0) - max(int(lo or 0), int(fan or 0))
            backlog, dropped = backlog + max(0, n), dropped + int(dr or 0)
            stored += int(hi or 0) - int(lo or 0)
            continue
        raw = await GROUP_STATS(client, _keys(topic, p, cid), (now_ms,))
        mn, nxt = int(raw[0]), int(raw[1])
        backlog += int(raw[3])
        inflight += int(raw[4])
        retrying += int(raw[5])
        dropped += int(raw[6])
        stored += nxt - mn
    return GroupStats(backlog, inflight, retrying, dropped, stored)


async def purge_partitions(
    client: AnyRedis, topic: str, partitions: Sequence[int] | range, cids: set[str] | Sequence[str]
) -> None:
    """Delete the messages of ``partitions`` and the progress of groups ``cids``."""
    for p in partitions:
        k = PartitionKeys(topic, p)
        keys = [k.stream, k.meta]
        for cid in cids:
            keys += progress_keys(topic, p, cid)  # the state first, as PURGE reads them
        await PURGE(client, keys, ())


def progress_keys(topic: str, p: int, cid: str) -> tuple[str, ...]:
    """The keys of consumer ``cid``'s progress in partition ``p``: what a member that
    left loses (:func:`forget`), and what a deleted group's erase picks (:mod:`.erase`)."""
    k = PartitionKeys(topic, p)
    return (k.state(cid), k.range_starts(cid), k.range_due(cid), k.ranges(cid), k.acked(cid))


async def forget(
    client: AnyRedis,
    topic: str,
    partitions: Sequence[int] | range,
    cid: str,
    *,
    after_ms: int | None = None,
) -> None:
    """Delete the progress of consumer ``cid`` (a fan-out member that left): now, or
    ``after_ms`` from now unless it comes back first (:func:`keep`)."""
    for p in partitions:
        keys = progress_keys(topic, p, cid)
        if after_ms is None:
            await client.delete(*keys)
            continue
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.pexpire(key, max(1, after_ms))
        await pipe.execute()


async def keep(client: AnyRedis, topic: str, partitions: Sequence[int] | range, cid: str) -> None:
    """Cancel a pending :func:`forget` of ``cid`` (the member came back)."""
    for p in partitions:
        pipe = client.pipeline(transaction=False)
        for key in progress_keys(topic, p, cid):
            pipe.persist(key)
        await pipe.execute()


FORGET_MEMBERS = Script(
    """
-- KEYS[1]: a group's members. ARGV: member, score pairs: each goes if its score is still
-- that (one that joined again meanwhile has a new score and stays).
local n = 0
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
"""
)


async def add_member(client: AnyRedis, topic: str, app: str, member: str, now_ms: int) -> None:
    """List fan-out ``member`` among ``app``'s group members on ``topic`` (it joined)."""
    await client.zadd(GroupKeys(topic, app).members, {member: now_ms})


async def drop_member(client: AnyRedis, topic: str, app: str, member: str) -> None:
    """``member`` left for good: off the list."""
    await client.zrem(GroupKeys(topic, app).members, member)


async def members(client: AnyRedis, topic: str, app: str) -> list[str]:
    """The listed fan-out members of ``app``'s group on ``topic`` that still have progress
    (:func:`members_of_groups` for one group)."""
    return (await members_of_groups(client, [(topic, app)]))[0]


async def members_of_groups(client: AnyRedis, groups: Sequence[tuple[str, str]]) -> list[list[str]]:
    """For each ``(topic, app)``, in order, its listed fan-out members that still have
    progress (their state in partition 0: every partition's is made when a member joins).
    Those whose progress is gone — a durable member away past its keep time — leave the
    list here, unless they joined again meanwhile. Two round trips whatever the number of
    groups (and one per group with some gone)."""
    if not groups:
        return []
    pipe = client.pipeline(transaction=False)
    for topic, app in groups:
        pipe.zrange(GroupKeys(topic, app).members, 0, -1, withscores=True)
    listed = await pipe.execute()
    pipe = client.pipeline(transaction=False)
    for (topic, app), entries in zip(groups, listed, strict=True):
        for member, _ in entries:
            pipe.exists(PartitionKeys(topic, 0).state(consumer_id(app, member.decode())))
    present = iter(await pipe.execute() if any(listed) else ())
    out: list[list[str]] = []
    for (topic, app), entries in zip(groups, listed, strict=True):
        live, gone = [], []
        for member, score in entries:
            if next(present):
                live.append(member.decode())
            else:
                gone += [member, score]
        if gone:
            await FORGET_MEMBERS(client, (GroupKeys(topic, app).members,), gone)
        out.append(live)
    return out


EXPIRE = Script(
    READ_FN
    + RANGES_FN
    + """
-- KEYS as a lease's. ARGV: now, ttl_ms, limit, mode ('group' | 'fan').
-- Moves the group's cursor (or, mode 'fan', the partition's dispatch mark) over records
-- past their TTL that nobody was handed yet; returns {when the next one can expire, then
-- them as triples, to dead-letter}. The next one can expire when the first record left
-- does, or, none left, a TTL from now; now when the walk stopped early (a pull consumer
-- holds the partition, `limit` was reached, or PULL_READ_BYTES of records).
local now, ttl, limit, mode = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local m = redis.call('HMGET', K.meta, 'min', 'next', 'fan')
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local cur
if mode == 'fan' then
  cur = tonumber(m[3] or '0')
else
  local st = redis.call('HMGET', K.state, 'ack', 'cur', 'le')
  local le = tonumber(st[3])
  if le and le > now then return {s(now)} end  -- a pull consumer holds the partition
  cur = tonumber(st[2]) or tonumber(st[1]) or mn
end
if cur < mn then cur = mn end
local out, n, bytes, full = {s(now + ttl)}, 0, 0, false
while cur < nxt and n < limit and not full do
  local part = {}
  read_from(K.stream, cur, 16, part, nil, PULL_READ_BYTES - bytes)
  if #part == 0 then break end
  local live = false
  for i = 1, #part, 3 do
    local idx, c, rec = tonumber(part[i]), tonumber(part[i + 1]), part[i + 2]
    local due = struct.unpack('>i8', rec, 40) + struct.unpack('>i4', rec, 48) + ttl
    if due > now then
      live = true
      out[1] = s(due)
      break
    end
    if idx + c > cur then
      -- what goes back to be dead-lettered stays within PULL_READ_BYTES (at least one)
      if n > 0 and bytes + #rec > PULL_READ_BYTES then full = true; break end
      out[#out + 1] = s(idx); out[#out + 1] = s(c); out[#out + 1] = rec
      cur = idx + c; n = n + 1; bytes = bytes + #rec
    end
  end
  if live then break end
end
if n >= limit or full then out[1] = s(now) end
if n > 0 then
  if mode == 'fan' then redis.call('HSET', K.meta, 'fan', s(cur))
  else redis.call('HSET', K.state, 'cur', s(cur)); refresh_ack(cur) end
end
return out
"""
)


async def expire(
    client: AnyRedis,
    topic: str,
    partition: int,
    cid: str | None,
    *,
    now_ms: int,
    ttl_ms: int,
    limit: int = 1000,
) -> tuple[list[Delivery], int]:
    """Move group ``cid``'s cursor (None: the fan-out dispatch mark) over the records
    past their TTL that nobody was handed yet; those records, to dead-letter (at most
    ``limit`` and PULL_READ_BYTES of them: the time is then now, more may be past their
    TTL), and the time (ms) before which no other record of the partition can expire for
    the group."""
    flat = await EXPIRE(
        client,
        _keys(topic, partition, cid if cid is not None else "~fan"),
        (now_ms, ttl_ms, limit, "fan" if cid is None else "group"),
    )
    return _triples(partition, flat, 1, len(flat) - 1, 1), int(flat[0])


JOIN = Script(
    RANGES_FN
    + """
-- KEYS as a lease's. A fan-out member (re)joins: its cursor moves up to the partition's
-- dispatch mark (what was handed to others while it was away is not its), its unsettled
-- ranges stay its own. Returns the cursor.
local m = redis.call('HMGET', K.meta, 'min', 'fan')
local mark = math.max(tonumber(m[1] or '0'), tonumber(m[2] or '0'))
local st = redis.call('HMGET', K.state, 'cur', 'ack')
local cur = tonumber(st[1]) or tonumber(st[2])
if not cur or cur < mark then cur = mark end
redis.call('HSET', K.state, 'cur', s(cur))
refresh_ack(cur)
return s(cur)
"""
)


async def join(client: AnyRedis, topic: str, partition: int, cid: str) -> int:
    """Fan-out member ``cid`` (re)joins ``partition``: see :data:`JOIN`; its cursor."""
    return int(await JOIN(client, _keys(topic, partition, cid), ()))


SEED = Script(
    RANGES_FN
    + """
-- KEYS as a lease's. ARGV: now, then start, stop, attempt, flag per run. Each run becomes
-- a range due now (flag 'n': never delivered, 'r': delivered before); the cursor goes to
-- the partition's end. For moving progress kept elsewhere into the group (a migration).
local now = tonumber(ARGV[1])
local nxt = tonumber(redis.call('HGET', K.meta, 'next') or '0')
for i = 2, #ARGV, 4 do
  local r = {start = tonumber(ARGV[i]), stop = tonumber(ARGV[i + 1]),
             attempt = tonumber(ARGV[i + 2]), deadline = now, owner = '', flag = ARGV[i + 3],
             covered = {}}
  r.deliveries = r.attempt
  if r.flag == 'n' then r.deliveries = r.attempt - 1 end
  put_range(r)
end
redis.call('HSET', K.state, 'cur', s(nxt))
return s(refresh_ack(nxt))
"""
)


async def seed(
    client: AnyRedis,
    topic: str,
    partition: int,
    cid: str,
    runs: Sequence[tuple[int, int, int, bool]],
    *,
    now_ms: int,
) -> int:
    """Give group ``cid`` the unsettled ``(start, end, attempt, delivered_before)`` runs of
    ``partition``, due now, with its cursor at the end; the ack index after."""
    args: list[object] = [now_ms]
    for start, end, attempt, delivered in runs:
        args += [start, end, max(1, attempt), "r" if delivered else "n"]
    return int(await SEED(client, _keys(topic, partition, cid), args))


async def count_dropped(client: AnyRedis, topic: str, partition: int, n: int) -> None:
    """Count ``n`` messages of ``partition`` dropped without a dead-letter queue."""
    await client.hincrby(PartitionKeys(topic, partition).meta, "dropped", n)
