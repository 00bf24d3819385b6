"""The JSON form of trace rows (``pipeline trace --json``), read back by the Celery task.

Bodies travel as base64, times as ISO-8601 UTC with milliseconds and as epoch ms.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import orjson


def _time(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_row(row: dict[str, Any], max_body: int | None = None) -> dict[str, Any]:
    """One trace row as plain JSON values; the body cut to ``max_body`` bytes if given."""
    body = row["body"] or b""
    kept = body if max_body is None else body[:max_body]
    return {
        "topic": row["topic"],
        "partition": row["partition"],
        "index": row["index"],
        "app": row["app"],
        "business_id": row["business_id"],
        "attributes": dict(row["attributes"] or {}),
        "priority": row["priority"],
        "client_address": row["client_address"],
        "send_time": _time(row["send_time"]),
        "store_time": _time(row["store_time"]),
        "send_ms": int(row["send_time"].timestamp() * 1000),
        "store_ms": int(row["store_time"].timestamp() * 1000),
        "in_archive": bool(row["in_archive"]),
        "in_live": bool(row["in_live"]),
        "size": len(body),
        "body_base64": base64.b64encode(kept).decode("ascii"),
        "body_truncated": len(kept) < len(body),
    }


def trace_json(
    topic: str, message_id: str, rows: list[dict[str, Any]], max_body: int | None = None
) -> str:
    """The whole result as one line of JSON (``id``: the id searched)."""
    doc = {
        "topic": topic,
        "id": message_id,
        "count": len(rows),
        "rows": [json_row(r, max_body) for r in rows],
    }
    return orjson.dumps(doc).decode()


def parse_trace_json(text: str) -> dict[str, Any]:
    """The document printed by ``pipeline trace --json`` (its last non-empty line);
    ValueError when there is none or it is not such a document."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the trace printed nothing")
    try:
        doc = orjson.loads(lines[-1])
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"the trace printed no JSON: {lines[-1][:200]!r}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError("the trace's JSON has no rows")
    return doc
