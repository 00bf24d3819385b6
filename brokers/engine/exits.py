"""Process exits nobody asked for: a broker worker or an HTTP-MQ serving process that
died (a crash, the OOM killer, a kill -9), recorded by the process that started it and
starts it again (a broker's first process, the HTTP-MQ supervisor), for the alerts.

The service goes on — the dead process is replaced — so nothing else would tell the
platform team that it happened. Records are small JSON documents on one list (newest
first, the last ``MAX_KEPT`` kept: a process dying in a loop cannot fill the store);
the alert check takes them oldest first, each once.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import Any

import orjson

from brokers.engine.keys import PREFIX
from brokers.engine.redisio import AnyRedis, Script

EXITS_KEY = f"{PREFIX}:exits"
MAX_KEPT = 1_000

TAKE = Script(
    """
-- KEYS: the exits list. ARGV: the most to take. The oldest records, oldest last, taken
-- off the list.
local got = redis.call('LRANGE', KEYS[1], -tonumber(ARGV[1]), -1)
if #got > 0 then redis.call('LTRIM', KEYS[1], 0, -#got - 1) end
return got
"""
)


def how_it_ended(code: int) -> str:
    """A process's return code in words: 'was killed by SIGKILL', 'exited with code 1'."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"was killed by {name}"
    return f"exited with code {code}"


async def record_exit(client: AnyRedis, doc: Mapping[str, Any]) -> None:
    """Record one exit (``doc``: what the starter knows — the service, the process, its
    pid, how it ended, when)."""
    pipe = client.pipeline(transaction=False)
    pipe.lpush(EXITS_KEY, orjson.dumps(doc))
    pipe.ltrim(EXITS_KEY, 0, MAX_KEPT - 1)
    await pipe.execute()


async def take_exits(client: AnyRedis, limit: int = MAX_KEPT) -> list[dict[str, Any]]:
    """Up to ``limit`` recorded exits, oldest first, taken off the record (a record that
    is not a JSON object is dropped)."""
    out = []
    for raw in reversed(await TAKE(client, (EXITS_KEY,), (limit,))):
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out
