"""The console's delayed and timer messages: listed, searched by due time and by the id a
producer got, and cancelled through an application whose approval stops their delivery."""

from __future__ import annotations

import time

import pytest

from brokers.engine import Engine, Message
from mqcloud.approvals import services
from mqcloud.approvals.models import Application
from proxy.httpmq.messages import delayed_message_id
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db(transaction=True)

HOUR_MS = 3_600_000


def _hold(count: int) -> tuple[int, list[int]]:
    """``count`` delayed messages of shop on orders, due an hour apart from an hour on."""
    now = int(time.time() * 1000)

    async def hold(engine: Engine) -> list[int]:
        return [
            (
                await engine.append_delayed(
                    "orders",
                    "shop",
                    Message(f"later {i}".encode(), business_id=f"b{i}", attributes={"k": str(i)}),
                    deliver_at_ms=now + (i + 1) * HOUR_MS,
                    partition=1 if i == 0 else None,
                )
            ).delay_id
            for i in range(count)
        ]

    return now, engine_call(hold)


def test_held_messages_listed_and_searched(client, world):
    now, ids = _hold(3)
    client.force_login(world.alice)
    page = client.get("/topics/orders/timers/")
    assert page.status_code == 200
    rows = page.context["rows"]
    assert [r.delay_id for r in rows] == ids and page.context["total"] == 3
    # named, or the round-robin's turn when held: the producer was told which
    assert rows[0].partition == 1 and {rows[1].partition, rows[2].partition} == {0, 1}
    assert rows[0].properties == {"k": "0"} and rows[0].business_id == "b0"
    assert rows[0].message_id == delayed_message_id("orders", ids[0])
    html = page.content.decode()
    assert "later 0" in html and rows[2].message_id in html

    # by the msgId the producer got, and by the delay id
    by_msgid = client.get("/topics/orders/timers/", {"message_id": rows[1].message_id})
    assert [r.delay_id for r in by_msgid.context["rows"]] == [ids[1]]
    by_id = client.get("/topics/orders/timers/", {"message_id": str(ids[2])})
    assert [r.delay_id for r in by_id.context["rows"]] == [ids[2]]
    assert client.get("/topics/orders/timers/", {"message_id": "999"}).context["total"] == 0
    bad = client.get("/topics/orders/timers/", {"message_id": "not-an-id"})
    assert bad.status_code == 200 and "Not the id of a delayed message" in bad.content.decode()

    # by due time (UTC)
    def utc(ms: int) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000))

    window = client.get(
        "/topics/orders/timers/",
        {"due_from": utc(now + HOUR_MS + 30 * 60_000), "due_to": utc(now + 4 * HOUR_MS)},
    )
    assert [r.delay_id for r in window.context["rows"]] == ids[1:]
    backwards = client.get(
        "/topics/orders/timers/", {"due_from": utc(now + HOUR_MS), "due_to": utc(now)}
    )
    assert "Must not be before the start" in backwards.content.decode()

    # another team's topic is not there at all
    client.force_login(world.bob)
    assert client.get("/topics/orders/timers/").status_code == 404


def test_cancelling_is_an_application_that_stops_delivery(client, world):
    _, ids = _hold(2)
    client.force_login(world.alice)
    chosen = client.post("/topics/orders/timers/cancel/", {"ids": [str(ids[0])]})
    assert chosen.status_code == 302
    assert "kind=timer_cancel" in chosen["Location"] and f"ids={ids[0]}" in chosen["Location"]
    form = client.get(chosen["Location"])
    assert form.context["form"].initial["ids"] == str(ids[0])
    filed = client.post(
        "/applications/new/", {"kind": "timer_cancel", "topic": "orders", "ids": f"{ids[0]},999"}
    )
    app = Application.objects.get(kind="timer_cancel")
    assert filed["Location"] == f"/applications/{app.pk}/"
    assert app.payload == {"topic": "orders", "ids": [ids[0], 999]}
    # nothing changes before approval
    assert engine_call(lambda e: e.delayed_pending("orders")) == 2
    done = services.approve(app, world.root)
    assert done.status == "approved", done.error
    assert done.result == {"cancelled": 1, "not_held": [999]}
    assert engine_call(lambda e: e.delayed_message("orders", ids[0])) is None
    assert engine_call(lambda e: e.delayed_pending("orders")) == 1
    assert [r.delay_id for r in client.get("/topics/orders/timers/").context["rows"]] == ids[1:]

    # nothing selected, or not a number: back to the list with a message
    empty = client.post("/topics/orders/timers/cancel/", {}, follow=True)
    assert "Select at least one message" in empty.content.decode()
    assert (
        client.post("/topics/orders/timers/cancel/", {"ids": ["x"]}, follow=True).status_code == 200
    )
    # another team may not file one for this topic
    client.force_login(world.bob)
    assert client.post("/topics/orders/timers/cancel/", {"ids": ["1"]}).status_code == 404
    refused = client.post(
        "/applications/new/", {"kind": "timer_cancel", "topic": "orders", "ids": "1"}
    )
    assert refused.status_code == 200
    assert Application.objects.filter(kind="timer_cancel").count() == 1
