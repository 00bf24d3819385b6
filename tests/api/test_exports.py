"""Message exports: a time span of a topic written to a gzipped JSON Lines file by a
worker after approval, every message with its properties and body, then downloaded by
the topic's team (console and API) and by nobody else; the cap, the checks of the
application, and the files' expiry."""

from __future__ import annotations

import asyncio
import base64
import gzip
import os
import time
from pathlib import Path

import orjson
import pytest
from django.conf import settings
from rest_framework.test import APIClient

from brokers.catalog_loader import publish
from brokers.engine import BatchItem, Engine, Message, SpanTooLarge
from brokers.models import ProducerPolicy, Team
from mqcloud.approvals.models import Application, Status
from mqcloud.exports import expire_exports, export_messages, start_export
from tests import factories
from tests.api.test_operations import member_and_admin, worker  # noqa: F401
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def held():
    """Topic 'ledger' (2 partitions) of team 'books', produced to by 'till': five
    messages in the span (a text one with properties, a binary one, a batch of two, one
    on the other partition) between two outside it; returns (from_ms, to_ms)."""
    team = Team.objects.create(name="books")
    topic = factories.topic("ledger", factories.cluster_with_brokers("lc"), team, 2, 1)
    app, _ = factories.app("till", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    publish()

    async def produce(engine: Engine) -> tuple[int, int]:
        await engine.append("ledger", "till", [Message(b"before")], partition=0)
        await asyncio.sleep(0.01)
        start = engine.now_ms()
        await engine.append(
            "ledger",
            "till",
            [Message("€5 paid".encode(), business_id="order-1", attributes={"k": "v"})],
            partition=0,
        )
        await engine.append("ledger", "till", [Message(b"\xff\xfe")], partition=0)
        batch = Message.batch([BatchItem(b"one"), BatchItem(b"two")])
        await engine.append("ledger", "till", [batch], partition=0)
        await engine.append("ledger", "till", [Message(b"elsewhere")], partition=1)
        await asyncio.sleep(0.01)
        end = engine.now_ms()
        await asyncio.sleep(0.01)
        await engine.append("ledger", "till", [Message(b"after")], partition=1)
        return start, end

    return engine_call(produce)


def lines(data: bytes) -> list[dict]:
    return [orjson.loads(line) for line in gzip.decompress(data).splitlines()]


def test_the_span_is_written_one_message_a_line(held):
    start, end = held
    plan = {
        str(p): list(span)
        for p, span in engine_call(
            lambda e: e.stored_spans("ledger", from_ms=start, to_ms=end)
        ).items()
    }
    result = export_messages.apply(args=("ledger", plan)).get()
    assert result["written"] == {"0": 4, "1": 1} and result["file"].endswith(".jsonl.gz")
    rows = lines((Path(settings.EXPORT_DIR) / result["file"]).read_bytes())
    assert [(r["partition"], r["index"]) for r in rows] == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 0)]
    text, binary, one, two, elsewhere = rows
    assert text["body"] == "€5 paid" and "encoding" not in text
    assert text["business_id"] == "order-1" and text["properties"]["k"] == "v"
    assert text["app"] == "till" and text["protocol"] and text["store_time_ms"] >= start
    assert binary["encoding"] == "base64" and base64.b64decode(binary["body"]) == b"\xff\xfe"
    assert (one["body"], two["body"], elsewhere["body"]) == ("one", "two", "elsewhere")


def test_a_span_over_the_cap_writes_nothing(held, settings):
    start, end = held
    settings.MESSAGE_EXPORT_MAX = 4
    with pytest.raises(SpanTooLarge, match="at most 4"):
        start_export("ledger", start, end)


def test_exported_files_expire(settings, tmp_path):
    settings.EXPORT_DIR = str(tmp_path)
    old, new = tmp_path / "old.jsonl.gz", tmp_path / "new.jsonl.gz"
    old.write_bytes(b"x")
    new.write_bytes(b"y")
    week_ago = time.time() - 8 * 86_400
    os.utime(old, (week_ago, week_ago))
    assert expire_exports() == 1
    assert not old.exists() and new.exists()


def test_applied_approved_written_and_downloaded_by_the_team_only(held, worker, client):  # noqa: F811
    start, end = held
    member, admin = member_and_admin(Team.objects.get(name="books"))
    for bad in (
        {"topic": "ledger", "from_ms": end, "to_ms": start},
        {"topic": "ledger", "from_ms": "soon", "to_ms": end},
        {"topic": "nope", "from_ms": start, "to_ms": end},
    ):
        refused = member.post(
            "/api/v1/applications/", {"kind": "message_export", "payload": bad}, format="json"
        )
        assert refused.status_code == 400, (bad, refused.content)
    filed = member.post(
        "/api/v1/applications/",
        {"kind": "message_export", "payload": {"topic": "ledger", "from_ms": start, "to_ms": end}},
        format="json",
    )
    assert filed.status_code == 201, filed.content
    pk = filed.json()["id"]
    assert member.get(f"/api/v1/applications/{pk}/export/").status_code == 404  # not approved
    approved = admin.post(f"/api/v1/applications/{pk}/approve/").json()
    assert approved["status"] == Status.APPROVED, approved
    assert approved["result"]["messages"] == 5
    deadline = time.monotonic() + 60
    while member.get(f"/api/v1/applications/{pk}/progress/").json()["state"] != "SUCCESS":
        assert time.monotonic() < deadline, "the export did not finish"
        time.sleep(0.2)
    download = member.get(f"/api/v1/applications/{pk}/export/")
    assert download.status_code == 200 and download["Content-Type"] == "application/gzip"
    assert f'filename="ledger-{start}-{end}.jsonl.gz"' in download["Content-Disposition"]
    data = b"".join(download.streaming_content)
    assert [r["body"] for r in lines(data)][-1] == "elsewhere" and len(lines(data)) == 5
    # the console offers it too, to the topic's team
    client.force_login(Team.objects.get(name="books").members.first())
    page = client.get(f"/applications/{pk}/").content.decode()
    assert "Download the export" in page
    console = client.get(f"/applications/{pk}/export/")
    assert b"".join(console.streaming_content) == data
    # nobody else
    stranger = APIClient()
    outsider = factories.user("outsider", team=Team.objects.create(name="others"))
    stranger.force_authenticate(outsider)
    assert stranger.get(f"/api/v1/applications/{pk}/export/").status_code == 404
    client.force_login(outsider)
    assert client.get(f"/applications/{pk}/export/").status_code == 404
    assert Application.objects.get(pk=pk).result["file"].endswith(".jsonl.gz")
