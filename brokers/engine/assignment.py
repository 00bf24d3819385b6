"""Partition groups shared out among a consumer group's members, the same on every process.

The state of (topic, app) lives under one hash tag (:class:`~brokers.engine.keys.AssignmentKeys`)
and is changed by one Lua script, so every process — and a coordinator that moved —
agrees on it:

* ``members`` (sorted set): member → expiry in ms (``session_timeout + grace`` after
  its last request);
* ``assign`` (hash): member → comma-separated group ids.

A request drops expired members, releases the member's previous groups, then gives it the
``max(1, groups // members)`` least-loaded groups (so groups with fewer assignees come
first), ties broken by group id.
"""

from __future__ import annotations

from collections.abc import Sequence

from brokers.engine.keys import AssignmentKeys
from brokers.engine.redisio import AnyRedis

SESSION_GRACE_MS = 60_000
"""A member's groups stay its own this long past its session timeout."""
DEFAULT_SESSION_TIMEOUT_MS = 60_000
"""The session timeout of a member that gave none."""

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


class GroupAssigner:
    """Assigns partition groups to the members of consumer groups."""

    def __init__(self, redis: AnyRedis) -> None:
        self._script = redis.register_script(ASSIGN)

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
        keys = AssignmentKeys(topic, app)
        raw = await self._script(
            keys=[keys.members, keys.assigned],
            args=[
                member,
                now_ms,
                now_ms + timeout + SESSION_GRACE_MS,
                ",".join(map(str, group_ids)),
            ],
        )
        text = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        return tuple(int(g) for g in text.split(",") if g)
