"""Exporting a topic's messages of a time span, delivered as a download (console-features:
"Export of a time span, with approval, delivered as a download link").

An approved ``message_export`` application counts the messages stored in the span (a
span over ``MESSAGE_EXPORT_MAX`` fails the application with nothing written) and queues
:func:`export_messages`, which writes them partition by partition, reporting progress as
the other operations do, to a gzipped JSON Lines file under ``EXPORT_DIR`` named after
its task: one line per message (a batch record's items each on their own line) with its
partition, index, store and send times, producing app, protocol and address,
businessId, every property (JMQ4 attributes, zbus and VibeMQ headers, HTTP-MQ keys) and
the body — UTF-8 text, or base64 with ``"encoding": "base64"``. It is written to a
temporary name and renamed when complete, so a download never sees half a file.

The file is served to the members of the topic's team and to platform admins, and removed
after ``MESSAGE_EXPORT_RETENTION_DAYS`` by a daily beat task.
"""

from __future__ import annotations

import base64
import gzip
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from celery import shared_task
from django.conf import settings
from django.http import FileResponse

from brokers.engine import SpanTooLarge, one_by_one
from mqcloud.approvals.models import Application, Kind
from mqcloud.console.message_properties import message_properties, producing_protocol
from mqcloud.engine_access import run_in_session
from mqcloud.operations import partition_by_partition

if TYPE_CHECKING:
    from brokers.engine import Delivery, Engine

READ_CHUNK = 1000
"""Records read per engine call while exporting."""
FILE_NAME = re.compile(r"^[0-9a-f-]{36}\.jsonl\.gz$")
"""What an export file is called: its task id (a UUID)."""


def export_dir() -> Path:
    return Path(settings.EXPORT_DIR)


def export_file(application: Application) -> Path | None:
    """The finished file of a ``message_export`` application; None for another kind, a
    result that names no export file, or one not written yet or removed."""
    result = application.result
    name = result.get("file") if isinstance(result, dict) else None
    if application.kind != Kind.MESSAGE_EXPORT or not isinstance(name, str):
        return None
    if not FILE_NAME.match(name):
        return None
    path = export_dir() / name
    return path if path.is_file() else None


def download_name(payload: object) -> str:
    """The file name a download is offered under: ``<topic>-<from_ms>-<to_ms>.jsonl.gz``."""
    if not isinstance(payload, dict):
        return "export.jsonl.gz"
    return f"{payload.get('topic')}-{payload.get('from_ms')}-{payload.get('to_ms')}.jsonl.gz"


def download(application: Application) -> FileResponse | None:
    """The finished file of a ``message_export`` application as an attachment; None when
    :func:`export_file` has none."""
    path = export_file(application)
    if path is None:
        return None
    return FileResponse(
        path.open("rb"),
        as_attachment=True,
        filename=download_name(application.payload),
        content_type="application/gzip",
    )


def start_export(topic: str, from_ms: int, to_ms: int) -> dict[str, Any]:
    """Count what the span holds (SpanTooLarge over MESSAGE_EXPORT_MAX, before anything
    is written), then queue the export; the application's result keeps the task id and
    the file's name."""
    spans = run_in_session(lambda engine: engine.stored_spans(topic, from_ms=from_ms, to_ms=to_ms))
    total = sum(end - first for first, end in spans.values())
    if total > settings.MESSAGE_EXPORT_MAX:
        raise SpanTooLarge(
            f"{total} messages were stored in that span; at most"
            f" {settings.MESSAGE_EXPORT_MAX} are exported at once: choose a shorter span"
        )
    plan = {str(p): list(span) for p, span in sorted(spans.items())}
    task = export_messages.delay(topic, plan)
    return {
        "task_id": task.id,
        "operation": "export",
        "messages": total,
        "spans": plan,
        "file": f"{task.id}.jsonl.gz",
    }


def message_line(delivery: Delivery) -> bytes:
    """One message (not a batch record) as a JSON line."""
    msg = delivery.message
    line: dict[str, Any] = {
        "partition": delivery.partition,
        "index": delivery.index,
        "store_time_ms": msg.store_time_ms,
        "send_time_ms": msg.send_time_ms,
        "app": msg.app,
        "protocol": producing_protocol(msg),
        "client_address": msg.client_address,
        "business_id": msg.business_id,
        "properties": message_properties(msg),
    }
    body = bytes(msg.body)
    try:
        line["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        line["body"] = base64.b64encode(body).decode("ascii")
        line["encoding"] = "base64"
    return orjson.dumps(line) + b"\n"


async def write_span(
    engine: Engine, out: gzip.GzipFile, topic: str, p: int, span: list[int]
) -> int:
    """Write partition ``p``'s messages ``[first, end)`` (a batch record crossing an end
    is written whole, once); how many were written."""
    first, end = span
    lo, _ = await engine.bounds(topic, p)
    at, written = max(first, lo), 0  # what retention removed since is gone
    while at < end:
        records = await engine.read(topic, p, at, READ_CHUNK)
        if not records:
            break
        for record in records:
            if record.index >= end:
                return written
            for item in one_by_one([record]):
                out.write(message_line(item))
                written += 1
            at = record.index + record.count
    return written


@shared_task(bind=True)
def export_messages(self, topic: str, plan: dict[str, list[int]]) -> dict[str, Any]:
    """Write each partition's span to this task's export file, reporting progress."""
    directory = export_dir()
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{self.request.id}.jsonl.gz"
    partial = final.with_suffix(".part")
    with gzip.open(partial, "wb") as out:

        async def step(engine: Engine, p: int) -> int:
            return await write_span(engine, out, topic, p, plan[str(p)])

        outcome = partition_by_partition(self, lambda _: [int(p) for p in plan], step, "written")
    partial.rename(final)
    return {**outcome, "file": final.name, "bytes": final.stat().st_size}


def expire_exports(now: float | None = None) -> int:
    """Remove export files (and leftovers of interrupted ones) older than
    MESSAGE_EXPORT_RETENTION_DAYS; how many were removed."""
    directory = export_dir()
    if not directory.is_dir():
        return 0
    cutoff = (now or time.time()) - settings.MESSAGE_EXPORT_RETENTION_DAYS * 86_400
    removed = 0
    for path in directory.iterdir():
        if path.is_file() and path.stat().st_mtime < cutoff:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
