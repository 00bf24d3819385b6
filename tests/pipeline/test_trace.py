"""The trace job: a businessId found in the Parquet archive and in the live store."""

from __future__ import annotations

import datetime as dt
import io

import msgspec
import pytest
from django.core.management import CommandError, call_command

from brokers.engine import CatalogSnapshot, Message
from pipeline import jobs
from pipeline.models import JobRun
from tests.pipeline.conftest import Store

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 11, 20, 23, 59, 30, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def put(store: Store, when: dt.datetime, business_id: str, body: bytes) -> int:
    """Append one message to orders/0 stored at ``when``; its index."""
    store.clock = lambda: when.timestamp()

    async def work(engine):
        msg = Message(body, business_id=business_id, send_time_ms=int(when.timestamp() * 1000))
        return (await engine.append("orders", "shop", [msg], partition=0)).first_index

    return store.run(work)


def trim_to(store: Store, catalog: CatalogSnapshot, keep: int) -> None:
    """Apply a retention of ``keep`` messages to orders (what Celery's retention does)."""
    orders = msgspec.structs.replace(catalog.topics["orders"], retention_max_count=keep)
    short = catalog.replace(topics={**catalog.topics, "orders": orders})
    Store(store.redis_url, short).run(lambda engine: engine.trim("orders"))


def test_trace_finds_archived_and_live(spark, catalog, store, archive_dir):
    put(store, at(0), "X", b"first")  # 2026-11-20 23:59:30, archived then trimmed
    put(store, at(1), "Y", b"other")  # 2026-11-21 00:00:30, archived and still live
    jobs.archive(once=True, spark=spark)
    put(store, at(2), "X", b"second")  # live only
    trim_to(store, catalog, 2)

    rows = jobs.find_messages("orders", "X", spark=spark)
    assert [(r["index"], r["body"], r["in_archive"], r["in_live"]) for r in rows] == [
        (0, b"first", True, False),
        (2, b"second", False, True),
    ]
    assert rows[0]["store_time"] == at(0)
    assert rows[0]["business_id"] == "X"
    assert rows[0]["app"] == "shop"
    both = jobs.find_messages("orders", "Y", spark=spark)
    assert [(r["index"], r["in_archive"], r["in_live"]) for r in both] == [(1, True, True)]

    # a time range narrows both the archive (across the date boundary) and the store
    later = jobs.find_messages("orders", "X", at(0.5), at(3), spark=spark)
    assert [r["index"] for r in later] == [2]
    assert JobRun.last("trace").rows == 1

    out = io.StringIO()
    call_command("pipeline", "trace", "--topic", "orders", "--business-id", "X", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[-1] == "trace: 2 messages"
    assert "orders/0@0" in lines[0] and "[archive]" in lines[0]
    assert "orders/0@2" in lines[1] and "[live]" in lines[1]


def test_trace_before_any_archive_and_bad_input(spark, catalog, store, archive_dir):
    put(store, at(0), "X", b"only live")
    rows = jobs.find_messages("orders", "X", spark=spark)
    assert [(r["index"], r["in_archive"], r["in_live"]) for r in rows] == [(0, False, True)]
    with pytest.raises(CommandError, match="does not exist"):
        call_command("pipeline", "trace", "--topic", "nope", "--business-id", "X")
    with pytest.raises(CommandError, match="ISO-8601"):
        call_command(
            "pipeline", "trace", "--topic", "orders", "--business-id", "X", "--from", "soon"
        )
    with pytest.raises(CommandError, match="required"):
        call_command("pipeline", "trace", "--topic", "orders", "--id", " ")
