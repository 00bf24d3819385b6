"""Process reports: what each broker process says about itself, for the console.

A broker keeps one small JSON document in the hash ``mq:reports`` under its name (state —
serving, or removed from the catalog and why —, its pid, counters such as protocol
errors), rewritten every heartbeat with the time it stops being valid. The console reads
them for ``/healthz`` and ``/metrics``; a report past its time (a process that died
without a word) is left out, and a stopping process deletes its own. One key, so it
works on Redis Cluster too.

Other reports that processes share — a front-end's own state for its peers — go on a
``board`` of their own (the hash ``mq:reports:<board>``), so the console's reports stay
the broker processes'.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from brokers.engine.keys import PREFIX
from brokers.engine.redisio import AnyRedis, Script

REPORTS_KEY = f"{PREFIX}:reports"


def board_key(board: str | None) -> str:
    """The hash of ``board``'s reports (None: the broker processes' own)."""
    return REPORTS_KEY if board is None else f"{REPORTS_KEY}:{board}"


async def publish_report(
    client: AnyRedis,
    name: str,
    doc: Mapping[str, Any],
    *,
    valid_for_s: float,
    board: str | None = None,
) -> None:
    """Store ``doc`` as ``name``'s report, valid for ``valid_for_s`` seconds."""
    body = {**doc, "valid_until": time.time() + valid_for_s}
    await client.hset(board_key(board), name, orjson.dumps(body))


async def withdraw_report(client: AnyRedis, name: str, *, board: str | None = None) -> None:
    """Delete ``name``'s report (a process stopping on purpose)."""
    await client.hdel(board_key(board), name)


async def read_reports(
    client: AnyRedis, *, board: str | None = None, names: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Every report still valid, by name (of ``names`` only, when given)."""
    now = time.time()
    key = board_key(board)
    if names is None:
        raws: list[tuple[Any, Any]] = list((await client.hgetall(key)).items())
    elif names:
        raws = list(zip(names, await client.hmget(key, list(names)), strict=True))
    else:
        return {}
    found = {}
    for name, raw in raws:
        if raw is None:
            continue
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict) and doc.get("valid_until", 0) >= now:
            label = name.decode() if isinstance(name, bytes) else str(name)
            found[label] = doc
    return found


TAKE_LAPSED = Script(
    """
-- KEYS: a board. ARGV: now (s). The reports past their time, as name, report pairs,
-- taken off the board (a report renewed meanwhile is valid, so it stays).
local out = {}
local all = redis.call('HGETALL', KEYS[1])
local now = tonumber(ARGV[1])
for i = 1, #all, 2 do
  local ok, doc = pcall(cjson.decode, all[i + 1])
  local til = ok and type(doc) == 'table' and tonumber(doc['valid_until'])
  if not til or til < now then
    redis.call('HDEL', KEYS[1], all[i])
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
"""
)


async def take_lapsed_reports(client: AnyRedis, *, board: str | None = None) -> dict[str, dict]:
    """The reports on ``board`` past their time — processes that stopped without
    withdrawing theirs: dead, or frozen for longer than their report was valid — by name,
    each without its ``valid_until``, taken off the board so each is reported once (an
    unreadable one counts as lapsed and comes back empty)."""
    found: dict[str, dict] = {}
    pairs = await TAKE_LAPSED(client, (board_key(board),), (time.time(),))
    for name, raw in zip(pairs[::2], pairs[1::2], strict=True):
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        doc.pop("valid_until", None)
        found[name.decode() if isinstance(name, bytes) else str(name)] = doc
    return found
