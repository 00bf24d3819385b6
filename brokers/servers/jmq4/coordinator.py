"""Coordinator (spec §6.6): which broker coordinates an app, and partition-group assignment.

The coordinator of an app is ``abs(javaHash(app)) % n`` over the live brokers sorted by id,
so every broker process computes the same answer from the same catalog snapshot. The
assignment state lives in Redis (one hash tag per (topic, app)), updated by one Lua script,
so several broker processes — and a coordinator that moved — agree on it:

* ``members`` (sorted set): member (the client's IP) → expiry in ms
  (``sessionTimeout + 60000`` after its last FETCH_ASSIGNED_PARTITION);
* ``assign`` (hash): member → comma-separated group ids.

A request drops expired members, releases the member's previous groups, then gives it the
``max(1, groups // members)`` least-loaded groups (so groups with fewer assignees come
first), ties broken by group id.
"""

from __future__ import annotations

from collections.abc import Sequence

from brokers.engine import BrokerInfo, CatalogSnapshot, java_hash

SESSION_GRACE_MS = 60_000
DEFAULT_SESSION_TIMEOUT_MS = 60_000

ASSIGN = """
-- KEYS: members, assign. ARGV: member, now, expires, group ids (comma separated)
local now = tonumber(ARGV[2])
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('HDEL', KEYS[2], m)
  redis.call('ZREM', KEYS[1], m)
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
local groups = {}
local load = {}
for g in string.gmatch(ARGV[4], '[^,]+') do
  groups[#groups + 1] = tonumber(g)
  load[tonumber(g)] = 0
end
if #groups == 0 then return '' end
for _, v in ipairs(redis.call('HVALS', KEYS[2])) do
  for g in string.gmatch(v, '[^,]+') do
    local id = tonumber(g)
    if load[id] then load[id] = load[id] + 1 end
  end
end
table.sort(groups, function(a, b)
  if load[a] ~= load[b] then return load[a] < load[b] end
  return a < b
end)
local members = redis.call('ZCARD', KEYS[1])
local want = math.max(1, math.floor(#groups / members))
local mine = {}
for i = 1, math.min(want, #groups) do mine[#mine + 1] = tostring(groups[i]) end
local joined = table.concat(mine, ',')
redis.call('HSET', KEYS[2], ARGV[1], joined)
redis.call('PEXPIRE', KEYS[1], ARGV[3] - now + 60000)
redis.call('PEXPIRE', KEYS[2], ARGV[3] - now + 60000)
return joined
"""


def live_brokers(snapshot: CatalogSnapshot) -> list[BrokerInfo]:
    """Brokers that are alive, sorted by id."""
    return sorted((b for b in snapshot.brokers.values() if b.alive), key=lambda b: b.id)


def coordinator_for(snapshot: CatalogSnapshot, app: str) -> BrokerInfo | None:
    """The coordinator broker of ``app``, or None when no broker is alive."""
    brokers = live_brokers(snapshot)
    if not brokers:
        return None
    return brokers[abs(java_hash(app)) % len(brokers)]


class Coordinator:
    """Assigns partition groups to consumer members, with the state kept in Redis."""

    def __init__(self, redis: object) -> None:
        self._redis = redis
        self._script = redis.register_script(ASSIGN)  # type: ignore[attr-defined]

    async def assign(
        self,
        topic: str,
        app: str,
        member: str,
        group_ids: Sequence[int],
        *,
        session_timeout_ms: int,
        now_ms: int,
    ) -> tuple[int, ...]:
        """Release ``member``'s groups and give it its share of ``group_ids``."""
        timeout = session_timeout_ms if session_timeout_ms > 0 else DEFAULT_SESSION_TIMEOUT_MS
        tag = f"mq:jmq4c:{{{topic}:{app}}}"
        raw = await self._script(
            keys=[f"{tag}:members", f"{tag}:assign"],
            args=[
                member,
                now_ms,
                now_ms + timeout + SESSION_GRACE_MS,
                ",".join(map(str, group_ids)),
            ],
        )
        text = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        return tuple(int(g) for g in text.split(",") if g)
