"""``python manage.py pipeline archive|rollup|trace …``: run a PySpark job of the pipeline."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from brokers.engine import TopicNotFound
from pipeline import jobs
from pipeline.catalog import load_catalog
from pipeline.trace_json import trace_json


def when(text: str) -> dt.datetime:
    """An ISO-8601 time (UTC when it has no offset) or epoch milliseconds."""
    if text.isdigit():
        return dt.datetime.fromtimestamp(int(text) / 1000, tz=dt.UTC)
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"not an ISO-8601 time or epoch ms: {text!r}") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


class Command(BaseCommand):
    help = "Run a pipeline job: archive topics to Parquet, roll up traffic, trace a message."

    def add_arguments(self, parser: CommandParser) -> None:
        jobs_parser = parser.add_subparsers(dest="job", required=True)
        arch = jobs_parser.add_parser("archive", help="stream archived topics to Parquet")
        arch.add_argument("--once", action="store_true", help="archive what is there, then stop")
        arch.add_argument(
            "--interval", type=float, default=10.0, help="seconds between micro-batches"
        )
        roll = jobs_parser.add_parser("rollup", help="per-minute traffic and consumer lag")
        roll.add_argument("--window", type=int, default=10, help="minutes to recompute")
        roll.add_argument("--since", type=str, help="start (ISO-8601 or epoch ms)")
        roll.add_argument("--until", type=str, help="end (ISO-8601 or epoch ms)")
        tr = jobs_parser.add_parser(
            "trace", help="find messages by any id a client saw (businessId, msgId, …)"
        )
        tr.add_argument("--topic", required=True)
        tr.add_argument(
            "--id",
            "--business-id",
            dest="id",
            required=True,
            help="businessId, partition:index, HTTP-MQ msgId, VibeMQ id or zbus msgid",
        )
        tr.add_argument("--from", dest="start", type=str)
        tr.add_argument("--to", dest="end", type=str)
        tr.add_argument("--limit", type=int, default=1000)
        tr.add_argument(
            "--json", action="store_true", help="print one JSON document (bodies in base64)"
        )
        tr.add_argument("--max-body", type=int, help="with --json: cut bodies to this many bytes")

    def handle(self, *args: Any, **opts: Any) -> None:
        job = opts["job"]
        if job == "archive":
            self._archive(opts)
        elif job == "rollup":
            self._rollup(opts)
        else:
            self._trace(opts)

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _archive(self, opts: dict[str, Any]) -> None:
        if opts["interval"] <= 0:
            raise CommandError("--interval must be positive")
        try:
            result = jobs.archive(
                once=opts["once"], interval_s=opts["interval"], progress=self._say
            )
        except KeyboardInterrupt:
            self._say("archive: stopped")
            return
        self._say(f"archive: {result.rows} rows in {result.batches} batches, lag {result.lag}")

    def _rollup(self, opts: dict[str, Any]) -> None:
        if opts["window"] < 1:
            raise CommandError("--window must be at least 1")
        since = when(opts["since"]) if opts["since"] else None
        until = when(opts["until"]) if opts["until"] else None
        if since and until and since >= until:
            raise CommandError("--since must be before --until")
        result = jobs.rollup(
            since=since, until=until, window_minutes=opts["window"], progress=self._say
        )
        self._say(
            f"rollup: {result.traffic_rows} traffic rows, {result.lag_rows} lag samples,"
            f" {result.deleted} expired rows deleted"
        )

    def _trace(self, opts: dict[str, Any]) -> None:
        start = when(opts["start"]) if opts["start"] else None
        end = when(opts["end"]) if opts["end"] else None
        if opts["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        if opts["max_body"] is not None and opts["max_body"] < 0:
            raise CommandError("--max-body must not be negative")
        if start and end and start >= end:
            raise CommandError("--from must be before --to")
        if not opts["id"].strip():
            raise CommandError("a message id or businessId is required")
        if opts["topic"] not in load_catalog().topics:  # before a JVM starts for nothing
            raise CommandError(f"topic {opts['topic']} does not exist")
        try:
            rows = jobs.find_messages(opts["topic"], opts["id"], start, end, limit=opts["limit"])
        except (TopicNotFound, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        if opts["json"]:
            self._say(trace_json(opts["topic"], opts["id"], rows, opts["max_body"]))
            return
        for r in rows:
            where = "+".join(k[3:] for k in ("in_archive", "in_live") if r[k])
            self._say(
                f"{r['store_time']:%Y-%m-%dT%H:%M:%S.%f}Z {r['topic']}/{r['partition']}"
                f"@{r['index']} app={r['app']} bytes={len(r['body'] or b'')} [{where}]"
            )
        self._say(f"trace: {len(rows)} messages")
