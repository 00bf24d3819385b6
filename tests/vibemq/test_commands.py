"""Raw-frame tests of every command and every error of vibemq.md (§1–§8, §13, §17)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from brokers.clients.vibemq import VibeMQClient
from tests.vibemq.conftest import FAST, Broker, Raw


async def connected(raw, catalog) -> Raw:
    r = await raw()
    r.send({"id": "c1", "type": "connect", "headers": {"authToken": catalog.token}})
    reply = await r.recv()
    assert reply["type"] == "connectAck"
    return r


async def test_connect_errors_keep_the_connection_open(raw, catalog):
    r = await raw()
    r.send({"id": "a", "type": "connect"})
    assert await r.recv() == {
        "id": "a",
        "type": "error",
        "errorCode": "AUTH_REQUIRED",
        "errorMessage": "headers.authToken required",
        "schemaVersion": "1.0",
    }
    r.send({"id": "b", "type": "connect", "headers": {"authToken": "nope"}})
    assert (await r.recv())["errorCode"] == "AUTH_FAILED"
    r.send({"id": "c", "type": "publish", "queue": "q", "payload": 1})
    err = await r.recv()
    assert (err["id"], err["errorCode"]) == ("c", "NOT_AUTHENTICATED")
    r.send({"id": "p", "type": "PING"})  # allowed before connect, any case
    assert await r.recv() == {"id": "p", "type": "pong", "schemaVersion": "1.0"}
    r.send({"id": "d", "type": 0, "headers": {"authToken": catalog.token}})
    ack = await r.recv()
    assert ack["id"] == "d" and ack["type"] == "connectAck"
    assert set(ack["headers"]) == {"serverVersion", "connectionId"}
    r.send({"id": "e", "type": "connect", "headers": {"authToken": catalog.token}})
    assert (await r.recv())["type"] == "connectAck"  # again: connectAck again


async def test_unknown_and_server_only_types(raw, catalog):
    r = await connected(raw, catalog)
    for i, kind in enumerate(["frobnicate", "deliver", "publishAck", 77, "error"]):
        r.send({"id": f"u{i}", "type": kind})
        err = await r.recv()
        assert (err["id"], err["errorCode"]) == (f"u{i}", "UNKNOWN_COMMAND")
    r.send({"id": "still", "type": "ping"})
    assert (await r.recv())["type"] == "pong"


@pytest.mark.parametrize(
    ("frame", "code", "echo"),
    [
        ({"type": "ping"}, "INVALID_MESSAGE", False),
        ({"id": "", "type": "ping"}, "INVALID_MESSAGE", False),
        ({"id": "x" * 257, "type": "ping"}, "INVALID_MESSAGE", False),
        ({"id": "q1", "type": "publish", "payload": 1}, "INVALID_QUEUE", True),
        ({"id": "q2", "type": "publish", "queue": "", "payload": 1}, "INVALID_QUEUE", True),
        ({"id": "q3", "type": "publish", "queue": "bad name", "payload": 1}, "INVALID_QUEUE", True),
        ({"id": "q4", "type": "subscribe", "queue": "é"}, "INVALID_QUEUE", True),
        ({"id": "q5", "type": "publish", "queue": "q" * 257}, "INVALID_QUEUE", True),
        (
            {
                "id": "h1",
                "type": "publish",
                "queue": "q",
                "headers": {f"k{i}": "v" for i in range(51)},
            },
            "INVALID_MESSAGE",
            True,
        ),
        (
            {"id": "h2", "type": "publish", "queue": "q", "headers": {"k": 1}},
            "INVALID_MESSAGE",
            True,
        ),
        (
            {"id": "h3", "type": "publish", "queue": "q", "headers": {"k": "v" * 4097}},
            "INVALID_MESSAGE",
            True,
        ),
        ({"id": "h4", "type": "publish", "queue": "q", "headers": []}, "INVALID_MESSAGE", True),
        ({"id": "n1", "type": "publish", "queue": "."}, "INVALID_QUEUE", True),
        ({"id": "n2", "type": "publish", "queue": ".."}, "INVALID_QUEUE", True),
    ],
)
async def test_validation_errors_store_nothing(raw, catalog, clients, frame, code, echo):
    r = await connected(raw, catalog)
    r.send(frame)
    err = await r.recv()
    assert err["type"] == "error" and err["errorCode"] == code
    assert (err["id"] == frame.get("id")) is echo and err["id"]
    r.send({"id": "alive", "type": "listQueues"})
    reply = await r.recv()
    assert reply == {"id": "alive", "type": "listQueues", "payload": [], "schemaVersion": "1.0"}


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">I", 0),
        struct.pack(">I", 1_048_577),
    ],
)
async def test_framing_errors_close_silently(raw, data):
    r = await raw()
    r.send(data)
    assert await asyncio.wait_for(r.reader.read(), 5) == b""


@pytest.mark.parametrize("body", [b"\xff\xfe{}", b"{not json", b"[1, 2]", b'"str"'])
async def test_unparseable_frames_get_invalid_message_then_close(raw, body):
    r = await raw()
    r.send(struct.pack(">I", len(body)) + body)
    err = await r.recv()
    assert err["type"] == "error" and err["errorCode"] == "INVALID_MESSAGE" and err["id"]
    assert await asyncio.wait_for(r.reader.read(), 5) == b""


async def test_a_lone_surrogate_is_refused_per_request_and_the_connection_stays(raw, catalog):
    """A string holding a lone UTF-16 surrogate escape leaves the frame a JSON object, so
    not a reason to close (§1): INVALID_MESSAGE echoing the id, naming the field, nothing
    stored (no UTF-8 body can hold that text). Before: "frame is not a JSON object: Input
    data was truncated" with a fresh id, and the connection closed."""
    r = await connected(raw, catalog)
    body = b'{"id":"ls1","type":"publish","queue":"lone","payload":"\\ud800"}'
    r.send(struct.pack(">I", len(body)) + body)
    err = await r.recv()
    assert (err["id"], err["type"], err["errorCode"]) == ("ls1", "error", "INVALID_MESSAGE")
    assert err["errorMessage"].startswith("payload holds a lone UTF-16 surrogate")
    r.send({"id": "alive", "type": "listQueues"})
    assert (await r.recv())["payload"] == []  # open, and the queue was not auto-created


async def test_a_binary_publish_reaches_a_subscriber_as_the_same_bytes(raw, catalog):
    """``"encoding": "base64"`` beside a publish's payload stores the bytes it holds; the
    subscriber gets them back so, with the publisher's headers (its own ``encoding``)
    untouched."""
    r = await connected(raw, catalog)
    r.send(
        {
            "id": "b1",
            "type": "publish",
            "queue": "bin",
            "payload": "/wDW0A==",
            "encoding": "base64",
            "headers": {"encoding": "gbk"},
        }
    )
    assert (await r.recv())["type"] == "publishAck"
    r.send(
        {
            "id": "t1",
            "type": "publish",
            "queue": "bin",
            "payload": "p",
            "headers": {"encoding": "base64"},
        }
    )
    assert (await r.recv())["type"] == "publishAck"
    r.send({"id": "s", "type": "subscribe", "queue": "bin"})
    assert (await r.recv())["type"] == "subscribeAck"
    got = {f["id"]: f for f in (await r.recv(), await r.recv())}  # in any order
    first, second = got["b1"], got["t1"]
    assert (first["id"], first["payload"], first["encoding"]) == ("b1", "/wDW0A==", "base64")
    assert first["headers"] == {"encoding": "gbk", "deliveryAttempts": "1"}
    assert (second["id"], second["payload"], "encoding" in second) == ("t1", "p", False)
    assert second["headers"] == {"encoding": "base64", "deliveryAttempts": "1"}


async def test_publish_subscribe_unsubscribe_ack_shapes(raw, catalog):
    r = await connected(raw, catalog)
    r.send({"id": "m1", "type": "Publish", "queue": "orders", "payload": {"a": [1, 2.5, None]}})
    assert await r.recv() == {
        "id": "m1",
        "type": "publishAck",
        "queue": "orders",
        "headers": {"messageId": "m1", "queueName": "orders"},
        "schemaVersion": "1.0",
    }
    r.send({"id": "s1", "type": 22, "queue": "orders"})
    assert await r.recv() == {
        "id": "s1",
        "type": "subscribeAck",
        "queue": "orders",
        "headers": {"queueName": "orders", "subscriptionId": "s1"},
        "schemaVersion": "1.0",
    }
    deliver = await r.recv()
    assert deliver == {
        "id": "m1",
        "type": "deliver",
        "queue": "orders",
        "payload": {"a": [1, 2.5, None]},
        "headers": {"deliveryAttempts": "1"},
        "schemaVersion": "1.0",
    }
    r.send({"id": "m1", "type": "ack"})  # the original client's form: top-level id
    r.send({"id": "s1", "type": "subscribe", "queue": "orders"})  # idempotent
    assert (await r.recv())["type"] == "subscribeAck"
    r.send({"id": "u1", "type": "unsubscribe", "queue": "orders"})
    assert await r.recv() == {
        "id": "u1",
        "type": "unsubscribeAck",
        "queue": "orders",
        "headers": {"queueName": "orders"},
        "schemaVersion": "1.0",
    }
    r.send({"id": "u2", "type": "unsubscribe", "queue": "orders"})
    assert (await r.recv())["type"] == "unsubscribeAck"
    r.send({"id": "i", "type": "queueInfo", "queue": "orders"})
    info = (await r.recv())["payload"]
    assert info["messageCount"] == 0 and info["inFlightCount"] == 0  # the ack settled it


async def test_queue_management(raw, catalog):
    r = await connected(raw, catalog)
    r.send(
        {
            "id": "cq",
            "type": "createQueue",
            "queue": "jobs",
            "headers": {
                "deliveryMode": "priorityBased",
                "maxQueueSize": "5",
                "messageTtl": "60000",
                "enableDeadLetterQueue": "TRUE",
                "maxRetryAttempts": "2",
                "overflowStrategy": "1",
            },
        }
    )
    reply = await r.recv()
    assert (reply["id"], reply["type"], reply["queue"]) == ("cq", "createQueue", "jobs")
    info = reply["payload"]
    assert {k: v for k, v in info.items() if k != "createdAt"} == {
        "name": "jobs",
        "messageCount": 0,
        "subscriberCount": 0,
        "deliveryMode": "PriorityBased",
        "maxSize": 5,
        "inFlightCount": 0,
        "messageTtl": 60000,
        "enableDeadLetterQueue": True,
        "deadLetterQueueName": "jobs.dlq",
        "maxRetryAttempts": 2,
        "overflowStrategy": "DropNewest",
    }
    assert info["createdAt"].endswith("Z") or "+00:00" in info["createdAt"]
    r.send({"id": "again", "type": "createQueue", "queue": "jobs"})
    assert (await r.recv())["errorCode"] == "QUEUE_EXISTS"
    r.send({"id": "auto", "type": "publish", "queue": "auto1", "payload": 1})
    assert (await r.recv())["type"] == "publishAck"
    r.send({"id": "auto2", "type": "createQueue", "queue": "auto1"})
    assert (await r.recv())["errorCode"] == "QUEUE_EXISTS"  # auto-created earlier
    for header, value in [
        ("deliveryMode", "Sideways"),
        ("maxQueueSize", "0"),
        ("maxQueueSize", "10000001"),
        ("messageTtl", "-5"),
        ("enableDeadLetterQueue", "yes"),
        ("maxRetryAttempts", "101"),
        ("overflowStrategy", "7"),
    ]:
        r.send({"id": "bad", "type": "createQueue", "queue": "x1", "headers": {header: value}})
        err = await r.recv()
        assert err["errorCode"] == "INVALID_MESSAGE" and header in err["errorMessage"]
    r.send({"id": "l", "type": "listQueues"})
    assert (await r.recv())["payload"] == ["auto1", "jobs", "jobs.dlq"]
    r.send({"id": "qi", "type": "queueInfo", "queue": "auto1"})
    auto = (await r.recv())["payload"]
    assert auto["messageCount"] == 1 and auto["deliveryMode"] == "RoundRobin"
    assert auto["maxSize"] == 10000 and auto["overflowStrategy"] == "DropOldest"
    assert auto["messageTtl"] is None or "messageTtl" not in auto
    # §8: the DLQ is off, and its name is the setting's default all the same
    assert (auto["enableDeadLetterQueue"], auto["deadLetterQueueName"]) == (False, "auto1.dlq")
    r.send({"id": "d", "type": "deleteQueue", "queue": "auto1"})
    assert await r.recv() == {
        "id": "d",
        "type": "deleteQueue",
        "queue": "auto1",
        "schemaVersion": "1.0",
    }
    for kind in ("deleteQueue", "queueInfo"):
        r.send({"id": "nf", "type": kind, "queue": "auto1"})
        assert (await r.recv())["errorCode"] == "QUEUE_NOT_FOUND"
    r.send({"id": "d2", "type": "deleteQueue", "queue": "jobs"})
    assert (await r.recv())["type"] == "deleteQueue"
    r.send({"id": "l2", "type": "listQueues"})
    assert (await r.recv())["payload"] == ["jobs.dlq"]  # a DLQ outlives its queue


async def test_long_dlq_name_is_invalid_queue(raw, catalog):
    r = await connected(raw, catalog)
    name = "q" * 253  # its DLQ, 257 characters, could not be named (§13)
    r.send(
        {
            "id": "x",
            "type": "createQueue",
            "queue": name,
            "headers": {"enableDeadLetterQueue": "true"},
        }
    )
    assert (await r.recv())["errorCode"] == "INVALID_QUEUE"


async def test_other_team_cannot_delete(clients, catalog):
    owner = await clients()
    await owner.create_queue("mine")
    stranger = await clients(catalog.other_team_token)
    with pytest.raises(Exception, match="FORBIDDEN"):
        await stranger.delete_queue("mine")
    admin = await clients(catalog.admin_token)
    await admin.delete_queue("mine")


async def test_queue_not_found_without_auto_create(catalog, redis_url):
    from dataclasses import replace

    b = Broker(1, redis_url)
    await b.start(replace(FAST, auto_create=False))
    try:
        c = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
        for call in (c.publish("nowhere", 1), c.subscribe("nowhere")):
            with pytest.raises(Exception, match="QUEUE_NOT_FOUND"):
                await call
        await c.close()
    finally:
        await b.stop()


async def test_disconnect_closes_without_reply(raw, catalog):
    r = await connected(raw, catalog)
    r.send({"id": "bye", "type": "disconnect"})
    assert await asyncio.wait_for(r.reader.read(), 5) == b""


async def test_rate_limited_frames_are_dropped(catalog, redis_url):
    from dataclasses import replace

    b = Broker(1, redis_url)
    await b.start(replace(FAST, frames_per_second=3))
    try:
        r = await Raw.open(b.port)
        for i in range(5):
            r.send({"id": f"p{i}", "type": "ping"})
        replies = [await r.recv() for _ in range(5)]
        assert [x["type"] for x in replies] == ["pong"] * 3 + ["error"] * 2
        assert [x["errorCode"] for x in replies[3:]] == ["RATE_LIMITED"] * 2
        assert [x["id"] for x in replies] == [f"p{i}" for i in range(5)]
        await r.close()
    finally:
        await b.stop()


async def test_connection_limits(catalog, redis_url):
    from dataclasses import replace

    b = Broker(1, redis_url)
    await b.start(replace(FAST, max_connections=1, connections_per_ip=3))
    try:
        first = await Raw.open(b.port)
        second = await Raw.open(b.port)
        err = await second.recv()
        assert err["errorCode"] == "CONNECTION_LIMIT" and err["id"]
        assert await asyncio.wait_for(second.reader.read(), 5) == b""
        third = await Raw.open(b.port)  # third connection from this IP in 60 s
        await third.recv()  # CONNECTION_LIMIT (first is still open)
        await first.close()
        fourth = await Raw.open(b.port)  # over the per-IP window: closed silently
        assert await asyncio.wait_for(fourth.reader.read(), 5) == b""
        for r in (second, third, fourth):
            await r.close()
    finally:
        await b.stop()


async def test_publish_rate_limit_of_the_producer_policy(clients, catalog, broker):
    from asgiref.sync import sync_to_async

    c = await clients()
    await c.create_queue("limited")

    @sync_to_async
    def limit() -> None:
        from django.db import connection

        from brokers.models import App, ProducerPolicy, Topic

        # the queue's creator got a producer policy with it: give it a limit
        policy = ProducerPolicy.objects.get(
            topic=Topic.objects.get(code="limited"), app=App.objects.get(code="app1")
        )
        policy.rate_limit = 2
        policy.save()
        connection.close()

    await limit()
    await broker.watcher.refresh()
    codes = []
    for i in range(4):
        try:
            await c.publish("limited", i)
            codes.append("ok")
        except Exception as exc:
            codes.append(exc.code)
    assert codes[:2] == ["ok", "ok"] and "RATE_LIMITED" in codes[2:]


def _long_app() -> str:
    """A 100-character app of team1 (from a worker thread, whose connection goes with it)."""
    from django.db import connection

    from brokers.catalog_loader import publish
    from brokers.models import Team
    from tests import factories

    try:
        _, token = factories.app("a" * 100, Team.objects.get(name="team1"))
        publish()
        return token
    finally:
        connection.close()


async def test_long_queue_names_of_a_long_app_get_their_policies(raw):
    """A 100-character app creating 200-character queues that share their first 160
    characters: each gets its own producer and consumer policy (their default names
    ``<app>.<queue>`` are too long; cut short, they would collide)."""
    from asgiref.sync import sync_to_async

    token = await sync_to_async(_long_app)()
    r = await raw()
    r.send({"id": "c", "type": "connect", "headers": {"authToken": token}})
    assert (await r.recv())["type"] == "connectAck"
    for i, tail in enumerate(("x" * 40, "y" * 40)):
        queue = "q" * 160 + tail
        r.send({"id": f"cq{i}", "type": "createQueue", "queue": queue})
        reply = await r.recv()
        assert reply["type"] == "createQueue", reply
        r.send({"id": f"p{i}", "type": "publish", "queue": queue, "payload": i})
        assert (await r.recv())["type"] == "publishAck"


@pytest.mark.parametrize("name", ["_jobs", "-jobs", ".hidden", "q" * 256])
async def test_every_queue_name_of_section_13_works(raw, catalog, name):
    """§13: 1-256 characters of [A-Za-z0-9._-], a leading '.', '_' or '-' included (only
    '.' and '..' are refused: they cannot be a path segment of the console or the API)."""
    r = await connected(raw, catalog)
    r.send({"id": "c", "type": "createQueue", "queue": name})
    assert (await r.recv())["type"] == "createQueue"
    r.send({"id": "p", "type": "publish", "queue": name, "payload": "hello"})
    assert (await r.recv())["type"] == "publishAck"
    r.send({"id": "s", "type": "subscribe", "queue": name})
    got = [await r.recv(), await r.recv()]
    assert {m["type"] for m in got} == {"subscribeAck", "deliver"}
    [deliver] = [m for m in got if m["type"] == "deliver"]
    assert (deliver["queue"], deliver["payload"]) == (name, "hello")
    r.send({"id": "l", "type": "listQueues"})
    assert name in (await r.recv())["payload"]
