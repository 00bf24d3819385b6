"""Process reports: what each broker process says about itself, for the console.

A broker keeps one small JSON document in the hash ``mq:reports`` under its name (state —
serving, or removed from the catalog and why —, its pid, counters such as protocol
errors), rewritten every heartbeat with the time it stops being valid. The console reads
them for ``/healthz`` and ``/metrics``; a report past its time (a process that died
without a word) is left out, and a stopping process deletes its own. One key, so it
works on Redis Cluster too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from brokers.engine.keys import PREFIX
from brokers.engine.redisio import AnyRedis

REPORTS_KEY = f"{PREFIX}:reports"


async def publish_report(
    client: AnyRedis, name: str, doc: Mapping[str, Any], *, valid_for_s: float
) -> None:
    """Store ``doc`` as ``name``'s report, valid for ``valid_for_s`` seconds."""
    body = {**doc, "valid_until": time.time() + valid_for_s}
    await client.hset(REPORTS_KEY, name, orjson.dumps(body))


async def withdraw_report(client: AnyRedis, name: str) -> None:
    """Delete ``name``'s report (a process stopping on purpose)."""
    await client.hdel(REPORTS_KEY, name)


async def read_reports(client: AnyRedis) -> dict[str, dict[str, Any]]:
    """Every report still valid, by name."""
    now = time.time()
    found = {}
    for name, raw in (await client.hgetall(REPORTS_KEY)).items():
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict) and doc.get("valid_until", 0) >= now:
            key = name.decode() if isinstance(name, bytes) else str(name)
            found[key] = doc
    return found
