"""Console-token HTTP-MQ endpoints: config, reset, unregister, progress; auth and audit."""

from __future__ import annotations

import socket
import time

import httpx
import orjson
import pytest

from brokers.models import ConsumerPolicy, Team, TeamMembership
from mqcloud.approvals.models import AuditEvent
from tests import factories
from tests.httpmq.conftest import make_catalog, release_delayed, wait_known

pytestmark = pytest.mark.django_db(transaction=True)


def app_headers(s) -> dict[str, str]:
    return {"Authorization": f"Bearer {s.token}"}


def member_of(s, username: str) -> str:
    user = factories.user(username)
    policy = ConsumerPolicy.objects.select_related("app__team").get(name=s.consumer)
    TeamMembership.objects.create(team=policy.app.team, user=user)
    return factories.token_for(user)


def post_config(mq, token: str, body: dict) -> httpx.Response:
    return mq.post(
        "/mq/consumer/config",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )


def test_config_read_and_change_reach_the_proxy(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    console = member_of(s, "ops1")
    r = mq.get(f"/mq/config/{s.consumer}", headers={"Authorization": f"Bearer {console}"})
    assert r.status_code == 200
    config = r.json()["result"]
    assert config["messageModel"] == "CLUSTERING" and config["pause"] is False
    assert config["maxPullSize"] == 32 and config["rateLimitEnabled"] is False

    r = post_config(mq, console, {"consumer": s.consumer, "pause": 1, "maxPullSize": 5})
    assert r.status_code == 200 and r.json()["status"] == 201
    deadline = time.monotonic() + 1.0
    while True:
        body = mq.get(
            "/mq/message", params={"topic": s.topic, "consumer": s.consumer}, headers=app_headers(s)
        ).json()["result"]
        if body["status"] == "PAUSED":
            break
        assert time.monotonic() < deadline, "config change not applied within 1 s"
        time.sleep(0.05)
    event = AuditEvent.objects.get(action="httpmq-config")
    assert event.actor.username == "ops1" and event.detail["pause"] == 1


def test_config_read_can_be_posted_back_with_a_change(mq):
    """What GET /mq/config shows can be posted back with one field changed (it answered
    400: the fields a POST cannot change were unknown, the booleans not 0/1)."""
    s = make_catalog(partitions=1)
    console = member_of(s, "ops-roundtrip")
    auth = {"Authorization": f"Bearer {console}"}
    config = mq.get(f"/mq/config/{s.consumer}", headers=auth).json()["result"]
    r = post_config(mq, console, {**config, "maxPullSize": 9, "pause": True})
    assert r.status_code == 200 and r.json()["status"] == 201, r.text
    policy = ConsumerPolicy.objects.get(name=s.consumer)
    assert policy.batch_size == 9 and policy.paused
    r = post_config(mq, console, {"consumer": s.consumer, "pause": False})
    assert r.status_code == 200 and not ConsumerPolicy.objects.get(name=s.consumer).paused


@pytest.mark.parametrize(
    "body",
    [
        {"maxPullSize": 500},
        {"consumeTimeoutInMillis": 5},
        {"pullTimeoutInMillis": 999_999},
        {"pause": 2},
        {"limitRate": 0},
        {"startPosition": "middle"},
        {"surprise": 1},
        {"maxPullSize": "10"},
        {"topic": "another", "maxPullSize": 5},
        {"messageModel": "BROADCASTING", "maxPullSize": 5},
    ],
)
def test_config_out_of_range_is_400(mq, body):
    s = make_catalog(partitions=1)
    console = member_of(s, f"ops-{len(body)}-{next(iter(body))}")
    r = post_config(mq, console, {"consumer": s.consumer, **body})
    assert r.status_code == 400 and r.json()["error"] == "BAD_PARAMETER"
    assert ConsumerPolicy.objects.get(name=s.consumer).batch_size == 32


def test_console_endpoints_need_a_console_token(mq):
    s = make_catalog(partitions=1)
    outsider = factories.token_for(factories.user("outsider"))
    assert mq.get(f"/mq/config/{s.consumer}").status_code == 401
    # a valid app token is not a console token: 403 FORBIDDEN, not 401 (http-mq.md §1)
    for path in (f"/mq/config/{s.consumer}", "/mq/clustering/queue/offset", "/mq/unregister"):
        app_token = mq.get(path, headers=app_headers(s))
        assert app_token.status_code == 403, path
        assert app_token.json()["error"] == "FORBIDDEN"
        assert "console token" in app_token.json()["message"]
    wrong = mq.get(f"/mq/config/{s.consumer}", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"] == "UNAUTHENTICATED"
    r = mq.get(f"/mq/config/{s.consumer}", headers={"Authorization": f"Bearer {outsider}"})
    assert r.status_code == 403
    admin = factories.token_for(factories.user("boss", admin=True))
    assert (
        mq.get("/mq/config/nope", headers={"Authorization": f"Bearer {admin}"}).status_code == 404
    )


def _raw_get(base_url: httpx.URL, target: str, token: str) -> tuple[bytes, bytes]:
    """(status line, body) of a GET of ``target`` exactly as written (an HTTP client
    would normalise ``..`` away)."""
    with socket.create_connection((base_url.host, base_url.port), timeout=20) as sock:
        sock.sendall(
            f"GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


def test_a_consumer_name_no_consumer_can_have_is_not_found(mq):
    """Names with a NUL, a line break, ``?``, ``#``, DEL or only dots: 404
    CONSUMER_NOT_FOUND like any other unknown name (they answered 500: the relay's HTTP
    client refused the control bytes and PostgreSQL a NUL; ``?`` cut the name short)."""
    make_catalog(partitions=1)
    admin = factories.token_for(factories.user("boss2", admin=True))
    for name in ("a%00b", "a%0Ab", "a%3Fb", "a%23b", "..", "a%7Fb", "."):
        status, body = _raw_get(mq.base_url, f"/mq/config/{name}", admin)
        assert status.startswith(b"HTTP/1.1 404"), (name, status, body)
        assert orjson.loads(body)["error"] == "CONSUMER_NOT_FOUND", (name, body)
    r = mq.post(
        "/mq/consumer/config",
        content=orjson.dumps({"consumer": "a\u0000b", "pause": 1}),
        headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
    )
    assert r.status_code == 404 and r.json()["error"] == "CONSUMER_NOT_FOUND", r.text


def test_reset_by_timestamp_replays(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    for text in ("a", "b"):
        mq.post(
            "/mq/produce", data={"producer": s.producer, "message": text}, headers=app_headers(s)
        )
    params = {"topic": s.topic, "consumer": s.consumer}
    body = mq.get("/mq/message", params=params, headers=app_headers(s)).json()["result"]
    mq.get("/mq/ack", params={**params, "requestId": body["requestId"]}, headers=app_headers(s))
    console = member_of(s, "ops2")
    r = post_config(mq, console, {"consumer": s.consumer, "resetOffsetTimestamp": 0})
    assert r.status_code == 200
    again = mq.get("/mq/message", params=params, headers=app_headers(s)).json()["result"]
    assert [m["message"] for m in again["msgList"]] == ["a", "b"]
    offsets = mq.get(
        "/mq/clustering/queue/offset",
        params={"consumer": s.consumer},
        headers={"Authorization": f"Bearer {console}"},
    ).json()["result"]
    assert offsets[0]["maxOffset"] == 2 and offsets[0]["committedOffset"] == 0
    assert offsets[0]["lockTimestamp"] > 0


def test_unregister_stops_http_service(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    console = member_of(s, "ops3")
    r = mq.post(
        "/mq/unregister",
        params={"consumer": s.consumer},
        headers={"Authorization": f"Bearer {console}"},
    )
    assert r.status_code == 200
    deadline = time.monotonic() + 1.0
    while (
        mq.get(
            "/mq/message", params={"topic": s.topic, "consumer": s.consumer}, headers=app_headers(s)
        ).status_code
        != 404
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_broadcast_offsets_per_client(mq):
    s = make_catalog(partitions=1, broadcast=True)
    wait_known(mq, s)
    mq.post("/mq/produce", data={"producer": s.producer, "message": "x"}, headers=app_headers(s))
    for client in ("c1", "c2"):
        mq.get(
            "/mq/message",
            params={"topic": s.topic, "consumer": s.consumer, "clientId": client},
            headers=app_headers(s),
        )
    console = member_of(s, "ops4")
    result = mq.get(
        "/mq/broadcast/queue/offset",
        params={"consumer": s.consumer},
        headers={"Authorization": f"Bearer {console}"},
    ).json()["result"]
    assert set(result) == {"c1", "c2"}
    wrong = mq.get(
        "/mq/clustering/queue/offset",
        params={"consumer": s.consumer},
        headers={"Authorization": f"Bearer {console}"},
    )
    assert wrong.status_code == 400
    assert Team.objects.exists()


def test_resend_of_a_delayed_message_by_the_msgid_its_producer_got(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    sent = mq.post(
        "/mq/produce",
        data={"producer": s.producer, "message": "held", "delayLevel": "1"},
        headers=app_headers(s),
    ).json()["result"]
    console = member_of(s, "ops9")
    early = post_config(mq, console, {"consumer": s.consumer, "retryMsgId": sent["msgId"]})
    assert early.status_code == 400 and "not delivered yet" in early.json()["message"]
    time.sleep(1.1)
    assert release_delayed(s.topic) == 1
    params = {"topic": s.topic, "consumer": s.consumer}
    body = mq.get("/mq/message", params=params, headers=app_headers(s)).json()["result"]
    assert [m["messageId"] for m in body["msgList"]] == [sent["msgId"]]
    mq.get("/mq/ack", params={**params, "requestId": body["requestId"]}, headers=app_headers(s))
    # before: 400, a delayed message's id named no position
    r = post_config(mq, console, {"consumer": s.consumer, "retryMsgId": sent["msgId"]})
    assert r.status_code == 200, r.text
    again = mq.get("/mq/message", params=params, headers=app_headers(s)).json()["result"]
    assert [(m["messageId"], m["message"]) for m in again["retryMsgList"]] == [
        (sent["msgId"], "held")
    ]
    unknown = sent["msgId"][:8] + "f" * 8 + "0" * 15 + "9"
    r = post_config(mq, console, {"consumer": s.consumer, "retryMsgId": unknown})
    assert r.status_code == 400 and "not known" in r.json()["message"]


def test_resend_reaches_the_next_fetch_once(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    sent = mq.post(
        "/mq/produce",
        data={"producer": s.producer, "message": "again please"},
        headers=app_headers(s),
    ).json()["result"]
    params = {"topic": s.topic, "consumer": s.consumer}
    body = mq.get("/mq/message", params=params, headers=app_headers(s)).json()["result"]
    mq.get("/mq/ack", params={**params, "requestId": body["requestId"]}, headers=app_headers(s))
    console = member_of(s, "ops5")
    bad = post_config(
        mq, console, {"consumer": s.consumer, "retryMsgId": "f" * 32, "maxPullSize": 7}
    )
    assert bad.status_code == 400
    assert ConsumerPolicy.objects.get(name=s.consumer).batch_size == 32  # nothing applied
    r = post_config(mq, console, {"consumer": s.consumer, "retryMsgId": sent["msgId"]})
    assert r.status_code == 200
    first = mq.get("/mq/message", params=params, headers=app_headers(s)).json()["result"]
    assert [m["message"] for m in first["retryMsgList"]] == ["again please"]
    assert first["retryMsgList"][0]["messageId"] == sent["msgId"]
    second = mq.get("/mq/message", params=params, headers=app_headers(s)).json()["result"]
    assert second["retryMsgListSize"] == 0
