"""HTTP-MQ endpoints against a live service (runproxy): produce, fetch, ack, unlock,
broadcast, errors."""

from __future__ import annotations

import base64
import time

import orjson
import pytest

from brokers.catalog_loader import publish
from brokers.models import ConsumerPolicy, ProducerPolicy
from mqcloud.console import engine_calls
from mqcloud.console.timers import delay_id_of
from proxy.httpmq.request_id import RequestId
from tests.engine_calls import engine_call
from tests.httpmq.conftest import make_catalog, release_delayed, wait_known

pytestmark = pytest.mark.django_db


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def produce(mq, s, text: str, **extra):
    return mq.post(
        "/mq/produce",
        data={"producer": s.producer, "message": text, **extra},
        headers=auth(s.token),
    )


def fetch(mq, s, **extra):
    return mq.get(
        "/mq/message",
        params={"topic": s.topic, "consumer": s.consumer, **extra},
        headers=auth(s.token),
    )


def drain(mq, s, **extra) -> list[str]:
    """Fetch (acking each batch with the next call) until nothing is left."""
    got, rid = [], None
    for _ in range(50):
        params = dict(extra)
        if rid:
            params["requestId"] = rid
        body = fetch(mq, s, **params).json()["result"]
        got += [m["message"] for m in body.get("msgList", [])]
        rid = body.get("requestId")
        if body["status"] == "NO_NEW_MSG" and body["msgListSize"] == 0 and not rid:
            break
    return got


def ack(mq, s, request_id: RequestId):
    return mq.get(
        "/mq/ack",
        params={"topic": s.topic, "consumer": s.consumer, "requestId": request_id.encode()},
        headers=auth(s.token),
    )


def test_produce_fetch_ack_flow(mq):
    s = make_catalog()
    wait_known(mq, s)
    response = produce(mq, s, "hello", keys="order-1")
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["sendStatus"] == "SEND_OK" and len(result["msgId"]) == 32
    assert result["messageQueue"]["topic"] == s.topic
    first = fetch(mq, s).json()
    assert first["status"] == 200
    body = first["result"]
    assert body["status"] == "FOUND"
    assert [m["message"] for m in body["msgList"]] == ["hello"]
    assert body["msgListSize"] == 1 and body["retryMsgListSize"] == 0
    rid = RequestId.decode(body["requestId"])
    assert (rid.queue, rid.offset, rid.next_offset) == (result["messageQueue"]["queueId"], 0, 1)
    assert body["queueInfo"]["messageQueue"]["queueId"] == rid.queue
    acked = fetch(mq, s, requestId=body["requestId"]).json()["result"]
    assert acked["ackInfo"]["status"] == 200
    assert acked["ackInfo"]["message"].startswith("ok ")
    assert acked.get("msgListSize") == 0
    assert drain(mq, s) == []


def test_non_utf8_and_batch_produce(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    batch = mq.post(
        "/mq/produce/batch",
        headers=auth(s.token),
        data={"producer": s.producer, "messages": orjson.dumps(["a", {"k": 1}, [1, 2]]).decode()},
    )
    assert batch.status_code == 200
    results = batch.json()["result"]
    assert [r["status"] for r in results] == [200, 200, 200]
    assert [r["result"]["queueOffset"] for r in results] == [0, 1, 2]
    assert drain(mq, s) == ["a", '{"k":1}', "[1,2]"]


def test_a_message_that_is_not_utf8_is_stored_as_sent(mq):
    """Form bytes that are not UTF-8 are the message's bytes, never U+FFFD: stored as
    sent, read back over HTTP-MQ as base64 with ``encoding`` (and over JMQ4 as they are);
    in any other parameter they are a 400."""
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    for body in (
        f"producer={s.producer}&message=%FF%FE%00ok".encode(),  # percent-escaped
        f"producer={s.producer}&message=".encode() + b"\xc3\x28raw",  # sent raw
    ):
        r = mq.post(
            "/mq/produce",
            content=body,
            headers={**auth(s.token), "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 200, r.text
    rows = engine_calls.read_range(s.topic, 0, 0, 10)
    assert [(r.body_preview, r.body_is_text) for r in rows] == [
        engine_calls.preview(b) for b in (b"\xff\xfe\x00ok", b"\xc3\x28raw")
    ]
    got = fetch(mq, s).json()["result"]["msgList"]
    assert [(m["message"], m.get("encoding")) for m in got] == [
        (base64.b64encode(b"\xff\xfe\x00ok").decode(), "base64"),
        (base64.b64encode(b"\xc3\x28raw").decode(), "base64"),
    ]
    bad = mq.post(
        "/mq/produce",
        content=f"producer={s.producer}&message=x&keys=%FF".encode(),
        headers={**auth(s.token), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert bad.status_code == 400 and bad.json()["message"] == "keys is not UTF-8 text"


def test_batch_values_keep_their_own_text_compacted(mq):
    """§2.2: a non-string element is sent as its compact JSON serialization: its own
    numbers, digit for digit (they were parsed into floats and written again)."""
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    messages = '["ok", 123456789012345678901234567890, {"id" : 98765432109876543210987}, 1e400]'
    batch = mq.post(
        "/mq/produce/batch",
        headers=auth(s.token),
        data={"producer": s.producer, "messages": messages},
    )
    assert batch.status_code == 200, batch.text
    assert drain(mq, s) == [
        "ok",
        "123456789012345678901234567890",
        '{"id":98765432109876543210987}',
        "1e400",
    ]
    for bad, why in (("[1,", "a JSON array"), ('{"a": 1}', "a non-empty JSON array")):
        r = mq.post(
            "/mq/produce/batch",
            headers=auth(s.token),
            data={"producer": s.producer, "messages": bad},
        )
        assert r.status_code == 400 and r.json()["message"] == f"messages must be {why}", r.text
    for deep in ("[" * 1000 + "]" * 1000, '[{"a":' * 3000 + "1" + "}]" * 3000):  # were 500s
        r = mq.post(
            "/mq/produce/batch",
            headers=auth(s.token),
            data={"producer": s.producer, "messages": deep},
        )
        assert r.status_code == 400 and r.json()["error"] == "BAD_PARAMETER", r.text
    lone = '["fine", "a\\ud800b"]'  # the second's escape is of a lone surrogate: no text
    r = mq.post(
        "/mq/produce/batch",
        headers=auth(s.token),
        data={"producer": s.producer, "messages": lone},
    )
    assert r.status_code == 400 and r.json()["message"].startswith(
        "messages hold a lone UTF-16 surrogate \\ud800"
    ), r.text
    assert drain(mq, s) == []


def test_produced_messages_show_http_mq_as_their_protocol(mq):
    """Single and batch produce mark their records, so the console's message browser says
    which protocol produced them (with the keys as a property)."""
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    assert produce(mq, s, "one", keys="k-1").status_code == 200
    batch = mq.post(
        "/mq/produce/batch",
        headers=auth(s.token),
        data={"producer": s.producer, "messages": orjson.dumps(["two"]).decode()},
    )
    assert batch.status_code == 200
    rows = engine_calls.read_range(s.topic, 0, 0, 10)
    assert [r.protocol for r in rows] == ["HTTP-MQ", "HTTP-MQ"]
    assert rows[0].properties == {"KEYS": "k-1"} and rows[0].business_id == "k-1"


def test_batch_with_failed_items_reports_each(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    big = "x" * (4 * 1024 * 1024 + 1)
    response = mq.post(
        "/mq/produce/batch",
        headers=auth(s.token),
        data={"producer": s.producer, "messages": orjson.dumps(["ok", big]).decode()},
    )
    assert response.status_code == 500
    body = response.json()
    assert body["error"] == "BATCH_FAILED"
    assert [r["status"] for r in body["result"]] == [200, 413]
    assert drain(mq, s) == ["ok"]


@pytest.mark.parametrize(
    ("data", "code", "error"),
    [
        ({}, 400, "BAD_PARAMETER"),
        ({"producer": "nope", "message": "m"}, 404, "PRODUCER_NOT_FOUND"),
        ({"message": "m", "delayLevel": "19"}, 400, "BAD_PARAMETER"),
        ({"message": "m", "delayLevel": "1", "deliveryTimestamp": "1"}, 400, "BAD_PARAMETER"),
        ({"message": "m", "asyncRetryTimesIfSendFailed": "11"}, 400, "BAD_PARAMETER"),
        ({"message": "m", "orderId": "1", "ordered": "true"}, 400, "BAD_PARAMETER"),
        ({"message": "m", "ordered": "maybe"}, 400, "BAD_PARAMETER"),
        ({"message": "x" * (4 * 1024 * 1024 + 1)}, 413, "MESSAGE_TOO_LARGE"),
    ],
)
def test_produce_bad_parameters(mq, data, code, error):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    payload = {"producer": s.producer, **data} if data else {}
    response = mq.post("/mq/produce", data=payload, headers=auth(s.token))
    assert response.status_code == code
    assert response.json()["status"] == code and response.json()["error"] == error
    assert response.json()["message"]


def test_auth_failures(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    data = {"producer": s.producer, "message": "m"}
    missing = mq.post("/mq/produce", data=data)
    assert missing.status_code == 401 and missing.json()["error"] == "UNAUTHENTICATED"
    wrong = mq.post("/mq/produce", data=data, headers=auth("garbage"))
    assert wrong.status_code == 401
    other = mq.post("/mq/produce", data=data, headers=auth(s.other_token))
    assert other.status_code == 403 and other.json()["error"] == "FORBIDDEN"
    by_param = mq.post("/mq/produce", data={**data, "token": s.token})
    assert by_param.status_code == 200
    for path in ("/mq/message", "/mq/ack", "/mq/unlock"):
        r = mq.get(path, params={"topic": s.topic, "consumer": s.consumer})
        assert r.status_code == 401, path
    # without a token, an unknown name is not told from a known one (it answered 404, so
    # anyone could list the producers and consumers that exist)
    unknown = mq.post("/mq/produce", data={**data, "producer": "nope"})
    assert unknown.status_code == 401 and unknown.json()["error"] == "UNAUTHENTICATED"
    r = mq.get("/mq/message", params={"topic": s.topic, "consumer": "nope"}, headers=auth("bad"))
    assert r.status_code == 401
    r = mq.get("/mq/message", params={"topic": s.topic, "consumer": "nope"}, headers=auth(s.token))
    assert r.status_code == 404 and r.json()["error"] == "CONSUMER_NOT_FOUND"


def test_not_http_enabled_is_not_served(mq):
    s = make_catalog(partitions=1)
    ConsumerPolicy.objects.filter(name=s.consumer).update(http_enabled=False)
    ProducerPolicy.objects.filter(name=s.producer).update(http_enabled=False)
    publish()
    time.sleep(0.5)
    assert produce(mq, s, "m").status_code == 404
    assert fetch(mq, s).status_code == 404


def test_topic_mismatch_and_bad_request_ids(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    r = mq.get(
        "/mq/message", params={"topic": "other", "consumer": s.consumer}, headers=auth(s.token)
    )
    assert r.status_code == 400 and r.json()["error"] == "TOPIC_MISMATCH"
    for bad in ("!!!", base64.urlsafe_b64encode(b"a,b,c").decode(), "x" * 600):
        r = fetch(mq, s, requestId=bad)
        assert r.status_code == 400 and r.json()["error"] == "INVALID_REQUEST_ID", bad
    for path in ("/mq/ack", "/mq/unlock"):  # missing is BAD_PARAMETER, undecodable INVALID_…
        r = mq.get(path, params={"topic": s.topic, "consumer": s.consumer}, headers=auth(s.token))
        assert r.status_code == 400 and r.json()["error"] == "BAD_PARAMETER", path
    illegal = RequestId("broker-1", 0, 5, 2, 1).encode()  # nextOffset < offset
    r = fetch(mq, s, requestId=illegal)
    assert r.status_code == 200
    assert r.json()["result"]["ackInfo"]["status"] == 400
    assert r.json()["result"]["ackInfo"]["message"].startswith("ack illegal")
    no_such_queue = RequestId("broker-1", 7, 0, 2, 1).encode()  # the topic has 1 partition
    r = fetch(mq, s, requestId=no_such_queue)
    assert r.status_code == 200  # the ack is refused, the fetch still runs
    assert r.json()["result"]["ackInfo"]["status"] == 400
    assert r.json()["result"]["ackInfo"]["message"].startswith("ack illegal")
    assert "status" in r.json()["result"]
    r = mq.get(
        "/mq/ack",
        params={"topic": s.topic, "consumer": s.consumer, "requestId": illegal},
        headers=auth(s.token),
    )
    assert r.status_code == 400


def test_an_ack_past_what_the_engine_holds_is_refused_and_the_queue_goes_on(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    produce(mq, s, "a")
    got = RequestId.decode(fetch(mq, s).json()["result"]["requestId"])
    for huge in (
        RequestId(got.broker, got.queue, got.offset, 10**20, got.lock_time),
        RequestId(got.broker, got.queue, got.offset, 2**60, got.lock_time),
    ):
        r = ack(mq, s, huge)
        assert r.status_code == 400 and r.json()["error"] == "INVALID_REQUEST_ID", r.text
    negative = RequestId(got.broker, got.queue, got.offset, -5, got.lock_time, True)
    r = ack(mq, s, negative)
    assert r.status_code == 400 and r.json()["message"].startswith("ack illegal"), r.text
    ok = ack(mq, s, got)
    assert ok.json()["message"].startswith("ok "), ok.text
    produce(mq, s, "b")
    after = fetch(mq, s).json()["result"]
    assert [m["message"] for m in after["msgList"]] == ["b"]


def test_an_offset_committed_past_the_end_is_corrected_by_the_next_fetch(mq):
    """§9.7 OFFSET_ILLEGAL: a committed offset outside the queue's range is corrected. An
    ack whose nextOffset lies past the end left the queue answering NO_NEW_MSG until that
    many messages were stored, and every message appended up to there was skipped."""
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    produce(mq, s, "a")
    got = RequestId.decode(fetch(mq, s).json()["result"]["requestId"])
    beyond = RequestId(got.broker, got.queue, got.offset, 1000, got.lock_time)
    r = ack(mq, s, beyond)
    assert r.json()["message"].startswith("ok "), r.text
    produce(mq, s, "b")
    after = fetch(mq, s).json()["result"]
    assert [m["message"] for m in after["msgList"]] == ["b"], after


def test_stale_and_wrong_offset_acks(mq):
    s = make_catalog(partitions=1, ack_timeout_ms=1000)
    wait_known(mq, s)
    produce(mq, s, "one")
    first = fetch(mq, s).json()["result"]
    old_rid = first["requestId"]
    time.sleep(1.2)  # the lock expires; the batch is delivered again under a new lock
    again = fetch(mq, s).json()["result"]
    assert [m["message"] for m in again["msgList"]] == ["one"]
    stale = mq.get(
        "/mq/ack",
        params={"topic": s.topic, "consumer": s.consumer, "requestId": old_rid},
        headers=auth(s.token),
    )
    assert stale.status_code == 200
    assert stale.json()["message"].startswith("ack lockTime small than")
    ok = mq.get(
        "/mq/ack",
        params={"topic": s.topic, "consumer": s.consumer, "requestId": again["requestId"]},
        headers=auth(s.token),
    )
    assert ok.json()["message"].startswith("ok ")
    twice = mq.get(
        "/mq/ack",
        params={"topic": s.topic, "consumer": s.consumer, "requestId": again["requestId"]},
        headers=auth(s.token),
    )
    assert twice.json()["message"].startswith("lock not exist")
    assert drain(mq, s) == []


def test_unlock_redelivers_at_once(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    produce(mq, s, "again")
    body = fetch(mq, s).json()["result"]
    r = mq.post(
        "/mq/unlock",
        data={"topic": s.topic, "consumer": s.consumer, "requestId": body["requestId"]},
        headers=auth(s.token),
    )
    assert r.status_code == 200 and r.json()["message"].endswith("unlock:true")
    assert [m["message"] for m in fetch(mq, s).json()["result"]["msgList"]] == ["again"]


def test_all_queues_locked_gives_503(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    produce(mq, s, "held")
    assert fetch(mq, s).json()["result"]["status"] == "FOUND"
    r = fetch(mq, s)
    assert r.status_code == 503 and r.json()["error"] == "NO_QUEUE_AVAILABLE"
    assert r.headers["Retry-After"] == "1"
    assert "result" not in r.json()
    # a fetch that acked something hears how its ack went, even when it gets a 503
    acked = fetch(mq, s, requestId=RequestId("broker-1", 0, 5, 2, 1).encode())
    assert acked.status_code == 503 and acked.json()["error"] == "NO_QUEUE_AVAILABLE"
    assert acked.json()["result"]["ackInfo"]["status"] == 400, acked.json()


def test_a_free_empty_queue_is_no_new_msg_while_another_is_locked(mq):
    """503 only when no queue could be locked (http-mq.md §9): with the one queue that
    has messages locked by another client, a free empty one answers NO_NEW_MSG."""
    s = make_catalog(partitions=2)
    wait_known(mq, s)
    produce(mq, s, "held", orderId="same")
    assert fetch(mq, s).json()["result"]["status"] == "FOUND"
    r = fetch(mq, s)
    assert r.status_code == 200 and r.json()["result"]["status"] == "NO_NEW_MSG", r.json()


def test_broadcast_each_client_gets_everything(mq):
    s = make_catalog(partitions=2, broadcast=True)
    wait_known(mq, s)
    assert fetch(mq, s).json()["error"] == "CLIENT_ID_REQUIRED"
    for text in ("a", "b", "c"):
        produce(mq, s, text)
    assert sorted(drain(mq, s, clientId="c1")) == ["a", "b", "c"]
    assert sorted(drain(mq, s, clientId="c2")) == ["a", "b", "c"]
    assert drain(mq, s, clientId="c1") == []
    clustering = make_catalog(partitions=1)
    wait_known(mq, clustering)
    assert fetch(mq, clustering, clientId="x").json()["error"] == "CLIENT_ID_NOT_ALLOWED"


def test_pause_takes_effect_within_a_second(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    produce(mq, s, "waiting")
    policy = ConsumerPolicy.objects.get(name=s.consumer)
    policy.paused = True
    policy.save()
    publish()
    deadline = time.monotonic() + 1.0
    while fetch(mq, s).json()["result"]["status"] != "PAUSED":
        assert time.monotonic() < deadline, "pause not seen within a second"
        time.sleep(0.05)
    body = fetch(mq, s).json()["result"]
    assert "requestId" not in body and body["msgListSize"] == 0


def test_consumer_rate_limit(mq):
    s = make_catalog(partitions=1, rate_limit=2)
    wait_known(mq, s)
    statuses = [fetch(mq, s).json()["result"]["status"] for _ in range(4)]
    assert "RATE_LIMITED" in statuses
    limited = fetch(mq, s).json()["result"]
    assert limited["status"] == "RATE_LIMITED" and "requestId" not in limited


def test_producer_rate_limit_429(mq):
    s = make_catalog(partitions=1)
    ProducerPolicy.objects.filter(name=s.producer).update(rate_limit=2)
    publish()
    time.sleep(0.3)
    codes = [produce(mq, s, f"m{i}").status_code for i in range(5)]
    assert 429 in codes
    r = produce(mq, s, "more")
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1


def test_use_cookie_carries_request_id(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    produce(mq, s, "c")
    r = fetch(mq, s, useCookie="true")
    assert "rid" in r.cookies
    mq.cookies.set("rid", r.cookies["rid"])
    r2 = fetch(mq, s, useCookie="true")
    assert r2.json()["result"]["ackInfo"]["message"].startswith("ok ")
    mq.cookies.clear()


def test_cors_and_methods(mq):
    r = mq.options("/mq/produce")
    assert r.status_code == 204 and r.headers["Access-Control-Allow-Origin"] == "*"
    assert mq.put("/mq/produce").status_code == 405


@pytest.mark.django_db(transaction=True)
def test_latest_start_is_pinned_at_approval_not_first_fetch(mq):
    """Messages produced between the consumer's creation and its first fetch are kept."""
    from brokers.models import App, Topic

    s = make_catalog(partitions=2, with_consumer=False)
    wait_known(mq, s, producer_only=True)
    produce(mq, s, "before-consumer")
    ConsumerPolicy.objects.create(
        topic=Topic.objects.get(code=s.topic),
        app=App.objects.get(code=s.app),
        http_enabled=True,
        start_position="latest",
    )
    publish()
    produce(mq, s, "after-approval")
    wait_known(mq, s)
    assert drain(mq, s) == ["after-approval"]


def test_delayed_message_arrives_when_due_under_its_msgid(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    r = produce(mq, s, "in a second", delayLevel="1")
    assert r.status_code == 200
    sent = r.json()["result"]
    assert sent["queueOffset"] == -1 and sent["deliverAt"] > 0
    assert fetch(mq, s).json()["result"]["status"] == "NO_NEW_MSG"
    time.sleep(1.1)
    assert release_delayed(s.topic) == 1
    body = fetch(mq, s).json()["result"]
    (got,) = body["msgList"]
    # the id the producer was given names the message its consumer gets (it was a
    # different one, made from the position the message got when released)
    assert got["message"] == "in a second" and got["messageId"] == sent["msgId"]
    # the queue it goes to, known when held (its only queue here)
    assert sent["messageQueue"]["queueId"] == 0 and sent["messageQueue"]["brokerName"]
    ordered = produce(mq, s, "held in order", delayLevel="1", orderId="o-1").json()["result"]
    assert ordered["messageQueue"]["queueId"] == 0 and ordered["messageQueue"]["brokerName"]


def test_queues_are_chosen_round_robin_delayed_messages_too(mq):
    """§2.1: without orderId or ordered, produces go round-robin over the queues; a
    delayed produce takes its turn too, is told its queue and arrives in it."""
    s = make_catalog(partitions=4)
    wait_known(mq, s)
    queues = [produce(mq, s, f"m{i}").json()["result"]["messageQueue"] for i in range(8)]
    ids = [q["queueId"] for q in queues]
    assert sorted(ids) == [0, 0, 1, 1, 2, 2, 3, 3] and ids[:4] == ids[4:]
    assert all(q["brokerName"].startswith("broker-") for q in queues)
    held = produce(mq, s, "later", delayLevel="1").json()["result"]
    assert held["messageQueue"]["queueId"] == ids[0]  # the next turn
    time.sleep(1.1)
    assert release_delayed(s.topic) == 1
    got = {}
    rid = None
    for _ in range(20):
        body = fetch(mq, s, **({"requestId": rid} if rid else {})).json()["result"]
        queue = body["queueInfo"]["messageQueue"]["queueId"] if "queueInfo" in body else None
        for m in body.get("msgList", []):
            got[m["message"]] = queue
        rid = body.get("requestId")
        if len(got) == 9:
            break
    assert got["later"] == held["messageQueue"]["queueId"]
    assert {got[f"m{i}"] for i in range(8)} == {0, 1, 2, 3}


def test_a_cancelled_delayed_message_is_never_delivered(mq):
    s = make_catalog(partitions=1)
    wait_known(mq, s)
    kept = produce(mq, s, "kept", delayLevel="1").json()["result"]["msgId"]
    dropped = produce(mq, s, "cancelled", delayLevel="1").json()["result"]["msgId"]
    delay_id = delay_id_of(s.topic, dropped)  # what the console and the API take
    assert delay_id is not None and delay_id != delay_id_of(s.topic, kept)
    assert engine_call(lambda e: e.cancel_delayed(s.topic, [delay_id])) == [delay_id]
    time.sleep(1.1)
    assert release_delayed(s.topic) == 1
    (got,) = fetch(mq, s).json()["result"]["msgList"]
    assert (got["message"], got["messageId"]) == ("kept", kept)
    assert engine_call(lambda e: e.delayed_pending(s.topic)) == 0


def test_forwarded_client_address_only_from_trusted_proxies(mq_urls):
    import httpx

    s = make_catalog(partitions=1)
    forwarded = {"Authorization": f"Bearer {s.token}", "X-Forwarded-For": "10.1.2.3, 10.0.0.1"}
    seen = []
    for url in mq_urls:  # mq 0 trusts nobody, mq 1 trusts 127.0.0.1
        with httpx.Client(base_url=url, timeout=20) as client:
            wait_known(client, s)
            client.post(
                "/mq/produce", data={"producer": s.producer, "message": "m"}, headers=forwarded
            )
            body = client.get(
                "/mq/message", params={"topic": s.topic, "consumer": s.consumer}, headers=forwarded
            ).json()["result"]
            seen.append(body["queueInfo"]["lastConsumeClientIp"])
            client.get(
                "/mq/unlock",
                params={"topic": s.topic, "consumer": s.consumer, "requestId": body["requestId"]},
                headers=forwarded,
            )
    assert seen == ["127.0.0.1", "10.1.2.3"]


def test_an_offset_retention_overtook_is_offset_illegal_then_corrected(mq):
    """§3.2 OFFSET_ILLEGAL: retention took messages the consumer had not acked. The fetch
    says so with no messages and a forceAck requestId from the committed offset to the
    first message kept; acked with the next fetch, that one reads from there."""
    from brokers.models import Topic

    s = make_catalog(partitions=1)
    Topic.objects.filter(code=s.topic).update(retention_max_count=2)
    publish()
    wait_known(mq, s)
    produce(mq, s, "a")
    produce(mq, s, "b")
    got = RequestId.decode(fetch(mq, s).json()["result"]["requestId"])
    only_a = RequestId(got.broker, got.queue, got.offset, 1, got.lock_time)  # a, not b
    assert ack(mq, s, only_a).json()["message"].startswith("ok ")
    for text in ("c", "d", "e"):
        produce(mq, s, text)
    assert engine_call(lambda e: e.trim(s.topic)) == {0: 3}  # b and c taken unread
    illegal = fetch(mq, s).json()["result"]
    assert illegal["status"] == "OFFSET_ILLEGAL", illegal
    assert (illegal["msgListSize"], illegal.get("msgList")) == (0, None), illegal
    assert illegal["queueInfo"]["committedOffset"] == 3, illegal
    rid = RequestId.decode(illegal["requestId"])
    assert (rid.offset, rid.next_offset, rid.force_ack) == (1, 3, True), rid
    after = fetch(mq, s, requestId=illegal["requestId"]).json()["result"]
    assert after["ackInfo"]["status"] == 200 and after["status"] == "FOUND", after
    assert [m["message"] for m in after["msgList"]] == ["d", "e"], after


def test_a_fetch_of_nothing_reports_and_records_the_queue_it_looked_at(mq):
    """§3.1 and §9 step 8: NO_NEW_MSG still carries queueInfo (no lock: lockTimestamp 0)
    and records the access time and client address, so an idle consumer that keeps
    polling is seen as alive."""
    s = make_catalog(partitions=2)
    wait_known(mq, s)
    before = int(time.time() * 1000)
    body = fetch(mq, s, clientIp="10.9.8.7").json()["result"]
    assert body["status"] == "NO_NEW_MSG" and "requestId" not in body
    info = body["queueInfo"]
    assert info["messageQueue"]["topic"] == s.topic
    assert info["messageQueue"]["queueId"] in (0, 1) and info["messageQueue"]["brokerName"]
    assert info["lockTimestamp"] == 0 and info["lastConsumeClientIp"] == "10.9.8.7"
    assert info["maxOffset"] == info["committedOffset"] == 0
    assert info["lastConsumeTimestamp"] >= before
    rows = engine_call(lambda e: e.progress(s.topic, s.app))
    row = rows[info["messageQueue"]["queueId"]]
    assert row.last_address == "10.9.8.7" and row.last_access_ms == info["lastConsumeTimestamp"]
    # the next empty fetch looks at the other queue first (the turn moves on)
    again = fetch(mq, s, clientIp="10.9.8.8").json()["result"]["queueInfo"]
    assert again["messageQueue"]["queueId"] != info["messageQueue"]["queueId"]
    produce(mq, s, "one")
    found = fetch(mq, s).json()["result"]
    assert found["status"] == "FOUND" and found["queueInfo"]["lockTimestamp"] > 0


def test_a_batch_meets_the_topics_bound_message_by_message(mq):
    """§2.2: the elements are independent messages. On a topic of at most 2 unsettled
    messages that blocks its publishers, a batch of 3 stores 2 and reports the third as
    failed (resent alone later), rather than storing all 3 past the bound."""
    from brokers.models import Topic

    s = make_catalog(partitions=1)
    Topic.objects.filter(code=s.topic).update(
        max_queue_size=2, overflow_policy=Topic.Overflow.BLOCK_PUBLISHER
    )
    version = publish().version
    deadline = time.monotonic() + 10  # until the service has the bound
    while mq.get("/healthz").json()["result"]["catalogVersion"] < version:
        assert time.monotonic() < deadline, "the HTTP-MQ service never saw the bound"
        time.sleep(0.05)
    response = mq.post(
        "/mq/produce/batch",
        headers=auth(s.token),
        data={"producer": s.producer, "messages": orjson.dumps(["a", "b", "c"]).decode()},
    )
    body = response.json()
    assert response.status_code == 500 and body["error"] == "BATCH_FAILED", body
    assert [r["status"] for r in body["result"]] == [200, 200, 503]
    assert "full" in body["result"][2]["message"]
    assert [r["result"]["queueOffset"] for r in body["result"][:2]] == [0, 1]
    assert drain(mq, s) == ["a", "b"]
    again = mq.post(
        "/mq/produce/batch",
        headers=auth(s.token),
        data={"producer": s.producer, "messages": orjson.dumps(["c"]).decode()},
    )
    assert again.status_code == 200 and drain(mq, s) == ["c"]
