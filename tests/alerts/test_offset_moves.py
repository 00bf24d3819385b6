"""Offset-move alerts: a consumer whose committed offset a client moved (a forceAck that
rewound or skipped) alerts its team once per throttle window; consuming, a consumer with
alerts off, or a zero threshold does not."""

from __future__ import annotations

import pytest

from brokers.engine import Message
from brokers.models import Team
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.offset_moves import check_offset_moves
from tests import factories
from tests.alerts.conftest import watched_and_quiet
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


@pytest.fixture
def moving():
    """Topic ``moved`` with consumers ``mover`` (alerts on) and ``mover-quiet`` (off)."""
    return watched_and_quiet("moving", "moved", "mover", "mover-quiet")


def consume_then(app: str, *, rewind: bool) -> None:
    """``app`` consumes and commits a message; then, with ``rewind``, its client
    forceAcks its next batch back to offset 0 (else commits it)."""

    async def run(engine) -> None:
        await engine.append_many("moved", "mover", [Message(b"x")] * 2)
        got = await engine.fetch("moved", app, count=1, owner="c")
        first = await engine.commit(
            "moved", app, 0, offset=got.start, next_offset=got.end, lock_time=got.lock_token
        )
        assert first.applied
        got = await engine.fetch("moved", app, count=1, owner="c")
        if rewind:
            done = await engine.commit(
                "moved", app, 0, offset=got.start, next_offset=0, lock_time=got.lock_token,
                force=True,
            )  # fmt: skip
            assert (done.moved_from, done.committed) == (got.start, 0)
        else:
            await engine.commit(
                "moved", app, 0, offset=got.start, next_offset=got.end, lock_time=got.lock_token
            )

    engine_call(run)


def test_a_client_moving_its_offset_alerts_once(moving, settings):
    settings.OFFSET_MOVE_ALERT_PER_HOUR = 1
    consume_then("mover", rewind=False)
    consume_then("mover-quiet", rewind=True)  # alerts off: not checked
    assert check_offset_moves() == []
    consume_then("mover", rewind=True)
    [event] = check_offset_moves()
    assert event.kind == AlertEvent.Kind.OFFSET_MOVED
    assert event.target == "consumer:mover.moved" and event.detail["moves"] == 1
    assert "rewound or skipped" in event.message and event.emailed
    consume_then("mover", rewind=True)
    assert check_offset_moves() == []  # throttled
    assert AlertEvent.objects.count() == 1


def test_a_zero_threshold_turns_the_alert_off(moving, settings):
    settings.OFFSET_MOVE_ALERT_PER_HOUR = 0
    consume_then("mover", rewind=True)
    assert check_offset_moves() == []


def test_the_alerts_page_explains_the_rule(moving, settings, client):
    settings.OFFSET_MOVE_ALERT_PER_HOUR = 2
    client.force_login(factories.user("mover-reader", team=Team.objects.get(name="moving")))
    page = client.get("/alerts/").content.decode()
    assert 'id="offset-move-alerts"' in page and "at least 2 times in the last hour" in page
    settings.OFFSET_MOVE_ALERT_PER_HOUR = 0
    assert "(off on this platform)" in client.get("/alerts/").content.decode()
