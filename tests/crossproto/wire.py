"""Each protocol on its own wire: what a producer sends, what a consumer sees, and every
place a group's counts are visible.

A produced message is described by :class:`Sent`: the body bytes and the ONE properties
map (plus businessId) the store must keep for it, whatever protocol produced it
(DESIGN.md "Properties"). Each consumer protocol has a *view* function mapping a
:class:`Sent` to exactly what its client must receive — that is what "intact" means per
pair:

* **JMQ4**: the body bytes; ``businessId``; the attributes = the whole properties map
  (pseudo-properties such as ``:status`` and ``:content-type`` included: the attributes
  ARE the map).
* **zbus**: the body bytes; the headers = every property whose name does not start with
  ``:`` under its lower-cased name (zbus lower-cases header names), with ``msgid`` = the
  consume's id and ``msgid_raw`` = the producer's id — its zbus ``msgid``, else its VibeMQ
  ``messageId``, else its businessId (absent when it has none); the status = ``:status``,
  else 200; no ``token``, no ``redelivered``.
* **VibeMQ** (TCP and WebSocket alike): ``id`` = ``messageId``, else the zbus ``msgid``,
  else the businessId, else the index; ``payload`` = the JSON value for
  ``:content-type: application/json``, else the body as a string when it is UTF-8, else its
  base64 with the frame's field ``"encoding": "base64"`` (no payload for an empty body);
  ``headers`` = every property but ``messageId`` and the ``:``-pseudo-properties, names as
  stored (a producer's own ``encoding`` among them), plus ``deliveryAttempts: 1``.
* **HTTP-MQ**: ``message`` = the body as UTF-8 text, else base64 with
  ``"encoding": "base64"``; ``properties`` = the whole properties map (absent when empty);
  ``messageId`` = the proxy's id of (topic, partition, index); a store ``timestamp``.

Producers: JMQ4 sends a non-UTF-8 body with businessId and attributes (escaped and non-ASCII
values), a text body without either, and a JSON-looking text body; zbus a non-UTF-8 body
with mixed-case headers (``Encoding: gbk`` among them) and a response-shaped message (status
201); VibeMQ a plain string, a JSON object, a string that looks like JSON and a non-UTF-8
body (its payload base64 with ``"encoding": "base64"``, beside a header ``encoding: gbk``);
HTTP-MQ a text with ``keys`` (businessId + property ``KEYS``) and a JSON-looking text
without keys. (HTTP-MQ cannot carry a non-UTF-8 body.)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import websockets

from brokers.clients.jmq4 import OutgoingMessage, build_message
from brokers.protocols.jmq4 import (
    AckEntry,
    AckPartition,
    AckTopic,
    AddConsumerRequest,
    AddProducerRequest,
    CommitAckRequest,
    FetchTopicMessageRequest,
    ProduceMessageRequest,
    ProduceTopic,
    TopicFetch,
)
from brokers.protocols.zbus import Message as ZbusMessage
from proxy.httpmq.messages import message_id as httpmq_message_id
from tests.crossproto.conftest import ZBUS_NAMES, World
from tests.jmq4.raw import RawClient
from tests.zbus.conftest import Raw as ZbusRaw
from tests.zbus.conftest import msg

BINARY = bytes(range(256)) + "ünï".encode() + b"\xff\xfe\x80"
"""Not UTF-8: every byte value, CR LF and NUL included."""
NOTE = "ünï ✓ = : # ! \\ tab\there"
"""A property value with non-ASCII text and every character Java Properties escapes."""
JSON = "application/json"
WAIT = 3.0
"""How long a consumer waits for the next expected message (a bounded wait: fewer
messages than produced is reported, not hung on)."""
NO_PAYLOAD = "<no payload field>"


@dataclass(frozen=True)
class Sent:
    """A produced message as every protocol must find it stored."""

    label: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    business_id: str = ""


Conns = list[Any]
"""Connections a test opened (each has an async ``close``), closed after the test."""


async def _open(conns: Conns, opener: Awaitable[Any]) -> Any:
    conn = await opener
    conns.append(conn)
    return conn


# ====================================================================== JMQ4


async def jmq4_session(world: World, conns: Conns, *registrations: Any) -> RawClient:
    raw = await _open(conns, RawClient.open(world.jmq4_port))
    reply = await raw.login(world.owner, world.token)
    assert reply.header.status == 0, reply.header
    for request in registrations:
        reply = await raw.call(request)
        assert reply.header.status == 0, (request, reply.header)
    return raw


JMQ4_MESSAGES = (
    ("binary", BINARY, "biz-1", {"TraceId": "t-1", "note": NOTE}),
    ("text", "plain ✓ text".encode(), "", {}),
    ("json-looking text", b'{"a":1}', "", {"kind": "json-looking"}),
)


async def produce_jmq4(world: World, topic: str, conns: Conns) -> list[Sent]:
    raw = await jmq4_session(world, conns, AddProducerRequest(topics=(topic,), app=world.owner))
    messages = tuple(
        build_message(
            OutgoingMessage(body, business_id=biz, attributes=attrs),
            app=world.owner,
            partition=0,
            compress=False,
        )
        for _, body, biz, attrs in JMQ4_MESSAGES
    )
    request = ProduceMessageRequest(
        topics=(ProduceTopic(topic=topic, messages=messages),), app=world.owner
    )
    reply = await raw.call(request)
    (entry,) = reply.payload.topics
    assert entry.code == 0, entry
    assert [(i.partition, i.index) for i in entry.items] == [(0, 0), (0, 1), (0, 2)], entry
    return [Sent(label, body, dict(attrs), biz) for label, body, biz, attrs in JMQ4_MESSAGES]


async def _jmq4_fetch(raw: RawClient, world: World, topic: str) -> tuple[int, tuple]:
    reply = await raw.call(
        FetchTopicMessageRequest(topics=(TopicFetch(topic=topic, count=10),), app=world.owner)
    )
    (entry,) = reply.payload.topics
    return entry.code, tuple(entry.messages)


async def consume_jmq4(world: World, topic: str, n: int, conns: Conns):
    raw = await jmq4_session(world, conns, AddConsumerRequest(topics=(topic,), app=world.owner))
    got: list = []
    deadline = time.monotonic() + WAIT
    while len(got) < n and time.monotonic() < deadline:  # one fetch should do
        code, messages = await _jmq4_fetch(raw, world, topic)
        assert code == 0, code
        got.extend(messages)
        if not messages:
            await asyncio.sleep(0.05)
    if got:
        acks = tuple(AckEntry(partition=m.partition, index=m.index) for m in got)
        request = CommitAckRequest(
            topics=(AckTopic(topic=topic, partitions=(AckPartition(partition=0, acks=acks),)),),
            app=world.owner,
        )
        reply = await raw.call(request)
        codes = [p.code for t in reply.payload.topics for p in t.partitions]
        assert codes == [0], codes
    views = [
        {
            "partition": m.partition,
            "index": m.index,
            "body": m.body,
            "businessId": m.business_id,
            "attributes": m.attribute_map(),
        }
        for m in got
    ]

    async def nothing_more() -> list[Any]:
        code, again = await _jmq4_fetch(raw, world, topic)
        return [] if (code, again) == (0, ()) else [f"code {code}", *again]

    return views, nothing_more


def jmq4_view(sent: Sent, index: int, topic: str) -> dict[str, Any]:
    return {
        "partition": 0,
        "index": index,
        "body": sent.body,
        "businessId": sent.business_id,
        "attributes": sent.properties,
    }


async def jmq4_probe(world: World, topic: str, conns: Conns) -> list[Any]:
    """What a JMQ4 consumer of the group gets now (nothing, after the pair's consumer)."""
    raw = await jmq4_session(world, conns, AddConsumerRequest(topics=(topic,), app=world.owner))
    code, messages = await _jmq4_fetch(raw, world, topic)
    return [] if (code, messages) == (0, ()) else [f"code {code}", *messages]


# ====================================================================== zbus


async def _zbus_recv(raw: ZbusRaw, wait: float = 5.0) -> ZbusMessage:
    return await raw.recv(wait)


async def produce_zbus(world: World, topic: str, conns: Conns) -> list[Sent]:
    raw = await _open(conns, ZbusRaw.open(world.zbus_port))
    host, port = raw.writer.get_extra_info("sockname")[:2]
    token = f"token: {world.token}"
    sent: list[Sent] = []

    await raw.send(
        msg(
            "cmd: produce",
            f"mq: {topic}",
            "msgid: z1",
            token,
            "X-Trace-Id: t-1",
            f"Note: {NOTE}",
            "Encoding: gbk",
            body=BINARY,
        )
    )
    ack = await _zbus_recv(raw)
    assert (ack.status, ack.msgid) == (200, "z1"), ack
    session = ack.headers["mq_reply"]
    stamped = {"remote-addr": f"{host}:{port}", "broker": world.zbus_address, "mq_reply": session}
    common = {"cmd": "produce", "mq": topic}
    sent.append(
        Sent(
            "binary",
            BINARY,
            {
                **common,
                "msgid": "z1",
                "x-trace-id": "t-1",
                "note": NOTE,
                "encoding": "gbk",
                **stamped,
            },
        )
    )

    # response-shaped, as an RPC worker's reply: its status is the property ":status"
    await raw.send(
        msg(
            "cmd: produce",
            f"mq: {topic}",
            "msgid: z2",
            token,
            "Reply-Note: done",
            body="réponse ✓".encode(),
            start="HTTP/1.1 201 Created",
        )
    )
    ack = await _zbus_recv(raw)
    assert (ack.status, ack.msgid) == (200, "z2"), ack
    sent.append(
        Sent(
            "status 201",
            "réponse ✓".encode(),
            {**common, "msgid": "z2", "reply-note": "done", **stamped, ":status": "201"},
        )
    )
    return sent


def zbus_consume_frame(topic: str, msgid: str, window: int, token: str) -> bytes:
    return msg(
        "cmd: consume", f"mq: {topic}", f"msgid: {msgid}", f"window: {window}", f"token: {token}"
    )


async def consume_zbus(world: World, topic: str, n: int, conns: Conns):
    raw = await _open(conns, ZbusRaw.open(world.zbus_port))
    await raw.send(zbus_consume_frame(topic, "c1", n, world.token))
    got: list[ZbusMessage] = []
    with contextlib.suppress(TimeoutError):  # fewer than n: reported by the caller
        while len(got) < n:
            got.append(await _zbus_recv(raw, WAIT))
    # §13.1: the next consume of a connection that never timed out settles what it got
    await raw.send(zbus_consume_frame(topic, "c2", 0, world.token))
    # and a parked consume shows whether anything comes again
    await raw.send(zbus_consume_frame(topic, "c3", 1, world.token))
    views = [{"status": m.status, "headers": dict(m.headers), "body": m.body} for m in got]

    async def nothing_more() -> list[Any]:
        try:
            again = await raw.recv(0.5)
        except TimeoutError:
            return []
        return [{"status": again.status, "headers": dict(again.headers), "body": again.body}]

    return views, nothing_more


def zbus_view(sent: Sent, index: int, topic: str) -> dict[str, Any]:
    props = sent.properties
    headers = {k.lower(): v for k, v in props.items() if not k.startswith(":")}
    raw_id = headers.get("msgid") or props.get("messageId") or sent.business_id
    headers["msgid"] = "c1"
    if raw_id:
        headers["msgid_raw"] = raw_id
    return {"status": int(props.get(":status", "200")), "headers": headers, "body": sent.body}


async def zbus_counts(world: World, topic: str, conns: Conns) -> dict[str, int]:
    raw = await _open(conns, ZbusRaw.open(world.zbus_port))
    await raw.send(msg("cmd: admin", "sub_cmd: data", "msgid: d1"))
    reply = await _zbus_recv(raw)
    assert reply.status == 200, reply
    info = json.loads(reply.body)["mqTable"][ZBUS_NAMES.get(topic, topic)]
    await raw.close()
    conns.remove(raw)
    return {
        "zbus data unconsumedMsgCount": info["unconsumedMsgCount"],
        "zbus data inFlightMsgCount": info["inFlightMsgCount"],
    }


# ====================================================================== VibeMQ


class VibeConn:
    """One VibeMQ connection, TCP (length-prefixed) or WebSocket (text frames); frames are
    written as compact JSON with raw UTF-8 (msgspec), so a payload's JSON text is known."""

    async def send(self, frame: dict[str, Any]) -> None:
        raise NotImplementedError

    async def recv(self, wait: float = 5.0) -> dict[str, Any]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def call(self, frame: dict[str, Any]) -> dict[str, Any]:
        await self.send(frame)
        return await self.recv()


class VibeTcp(VibeConn):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, frame: dict[str, Any]) -> None:
        body = msgspec.json.encode(frame)
        self.writer.write(struct.pack(">I", len(body)) + body)
        await self.writer.drain()

    async def recv(self, wait: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(wait):
            (n,) = struct.unpack(">I", await self.reader.readexactly(4))
            return json.loads(await self.reader.readexactly(n))

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


class VibeWs(VibeConn):
    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(msgspec.json.encode(frame).decode("utf-8"))

    async def recv(self, wait: float = 5.0) -> dict[str, Any]:
        return json.loads(await asyncio.wait_for(self.ws.recv(), wait))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()


VIBEMQ_CLIENT_VERSION = "xproto-vibemq/1.2"
"""What the VibeMQ clients of these tests say they are."""


async def vibemq_session(world: World, transport: str, conns: Conns) -> VibeConn:
    """An authenticated VibeMQ connection of the owner over ``tcp`` or ``ws``."""
    if transport == "tcp":
        reader, writer = await asyncio.open_connection("127.0.0.1", world.vibemq_port)
        conn: VibeConn = VibeTcp(reader, writer)
    else:
        url = world.web_url.replace("http://", "ws://") + "/ws/vibemq"
        conn = VibeWs(await websockets.connect(url, subprotocols=["vibemq"]))
    conns.append(conn)
    reply = await conn.call(
        {
            "id": "hello",
            "type": "connect",
            "headers": {"authToken": world.token, "clientVersion": VIBEMQ_CLIENT_VERSION},
        }
    )
    assert reply["type"] == "connectAck", reply
    return conn


VIBEMQ_MESSAGES = (
    ("string", "v1", "plain ✓ text", {"correlationId": "corr-1", "X-Mixed": "Value ü"}),
    ("json object", "v2", {"k": "v", "n": [1, 2, None, True], "u": "ünï ✓"}, {"kind": "json"}),
    ("json-looking string", "v3", '{"a":1}', {}),
    ("binary", "v4", BINARY, {"encoding": "gbk"}),
)


async def produce_vibemq(world: World, transport: str, topic: str, conns: Conns) -> list[Sent]:
    conn = await vibemq_session(world, transport, conns)
    sent: list[Sent] = []
    for label, msg_id, payload, headers in VIBEMQ_MESSAGES:
        frame: dict[str, Any] = {"id": msg_id, "type": "publish", "queue": topic}
        if isinstance(payload, bytes):  # a binary body: its base64, so marked
            frame["payload"] = base64.b64encode(payload).decode("ascii")
            frame["encoding"] = "base64"
        else:
            frame["payload"] = payload
        if headers:
            frame["headers"] = headers
        ack = await conn.call(frame)
        assert (ack["type"], ack["id"], ack.get("headers", {}).get("messageId")) == (
            "publishAck",
            msg_id,
            msg_id,
        ), ack
        props = {**headers, "messageId": msg_id}
        if isinstance(payload, bytes):
            body = payload
        elif isinstance(payload, str):
            body = payload.encode("utf-8")  # a string payload: its text, no JSON quotes
        else:
            body = msgspec.json.encode(payload)  # its JSON text as it went on the wire
            props[":content-type"] = JSON
        sent.append(Sent(label, body, props))
    return sent


async def consume_vibemq(world: World, transport: str, topic: str, n: int, conns: Conns):
    conn = await vibemq_session(world, transport, conns)
    await conn.send({"id": "sub", "type": "subscribe", "queue": topic})
    subscribed, delivered = False, []
    with contextlib.suppress(TimeoutError):  # fewer than n: reported by the caller
        while not subscribed or len(delivered) < n:
            frame = await conn.recv(WAIT)
            if frame.get("type") == "subscribeAck" and frame.get("id") == "sub":
                subscribed = True
            elif frame.get("type") == "deliver":
                delivered.append(frame)
            else:
                raise AssertionError(f"unexpected frame {frame}")
    assert subscribed, "no subscribeAck"
    for i, frame in enumerate(delivered):
        await conn.send({"id": f"ack{i}", "type": "ack", "headers": {"messageId": frame["id"]}})
    views = [
        {
            "id": f.get("id"),
            "queue": f.get("queue"),
            "payload": f.get("payload", NO_PAYLOAD),
            "encoding": f.get("encoding"),
            "headers": f.get("headers", {}),
        }
        for f in delivered
    ]

    async def nothing_more() -> list[Any]:
        try:
            return [await conn.recv(0.5)]
        except TimeoutError:
            return []

    return views, nothing_more


def vibemq_view(sent: Sent, index: int, topic: str) -> dict[str, Any]:
    props = sent.properties
    headers = {k: v for k, v in props.items() if k != "messageId" and not k.startswith(":")}
    payload: Any
    encoding = None
    if not sent.body:
        payload = NO_PAYLOAD
    elif props.get(":content-type") == JSON:
        payload = json.loads(sent.body)
    else:
        try:
            payload = sent.body.decode("utf-8")
        except UnicodeDecodeError:
            payload = base64.b64encode(sent.body).decode("ascii")
            encoding = "base64"
    headers["deliveryAttempts"] = "1"
    msg_id = props.get("messageId") or props.get("msgid") or sent.business_id or str(index)
    return {
        "id": msg_id,
        "queue": topic,
        "payload": payload,
        "encoding": encoding,
        "headers": headers,
    }


async def vibemq_counts(
    conn: VibeConn, transport: str, topic: str, n: int = 0
) -> dict[str, int | str]:
    reply = await conn.call({"id": f"qi{n}", "type": "queueInfo", "queue": topic})
    if reply.get("type") != "queueInfo":
        return {f"vibemq-{transport} queueInfo": str(reply)}
    info = reply["payload"]
    return {
        f"vibemq-{transport} queueInfo messageCount": info["messageCount"],
        f"vibemq-{transport} queueInfo inFlightCount": info["inFlightCount"],
    }


# ====================================================================== HTTP-MQ


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


HTTPMQ_MESSAGES = (
    ("text with keys", "texte ✓ & = ? + %20", "k1 k2"),
    ("json-looking text", '{"j":1}', ""),
)


async def produce_httpmq(world: World, topic: str, conns: Conns) -> list[Sent]:
    sent: list[Sent] = []
    for i, (label, text, keys) in enumerate(HTTPMQ_MESSAGES):
        data = {"producer": world.consumer_name(topic), "message": text}
        if keys:
            data["keys"] = keys
        r = await world.mq.post("/mq/produce", data=data, headers=bearer(world.token))
        body = r.json()
        assert r.status_code == 200 and body["result"]["sendStatus"] == "SEND_OK", body
        assert body["result"]["queueOffset"] == i, body
        sent.append(Sent(label, text.encode(), {"KEYS": keys} if keys else {}, keys))
    return sent


async def _httpmq_fetch(world: World, topic: str, *, must: bool = True) -> dict[str, Any]:
    """The ``result`` of a fetch; with ``must`` false a refusal's envelope instead."""
    r = await world.mq.get(
        "/mq/message",
        params={"topic": topic, "consumer": world.consumer_name(topic)},
        headers=bearer(world.token),
    )
    if r.status_code != 200 and not must:
        return {"HTTP": r.status_code, **r.json()}
    assert r.status_code == 200, r.text
    return r.json()["result"]


async def _httpmq_unlock(world: World, topic: str, result: dict[str, Any]) -> None:
    """Give back the lock a fetch took (a fetch that found nothing may keep one)."""
    if result.get("requestId"):
        await world.mq.post(
            "/mq/unlock",
            data={
                "topic": topic,
                "consumer": world.consumer_name(topic),
                "requestId": result["requestId"],
            },
            headers=bearer(world.token),
        )


async def _nothing() -> list[Any]:
    return []


async def consume_httpmq(world: World, topic: str, n: int, conns: Conns):
    deadline = time.monotonic() + WAIT
    while True:  # the first fetch should do
        result = await _httpmq_fetch(world, topic, must=False)
        if result.get("status") == "FOUND" or time.monotonic() > deadline:
            break
        await _httpmq_unlock(world, topic, result)
        await asyncio.sleep(0.05)
    if result.get("status") != "FOUND":
        return [result], _nothing
    assert result["msgListSize"] == len(result["msgList"]), result
    assert (result["retryMsgListSize"], result.get("retryMsgList")) == (0, None), result
    ack = await world.mq.post(
        "/mq/ack",
        data={
            "topic": topic,
            "consumer": world.consumer_name(topic),
            "requestId": result["requestId"],
        },
        headers=bearer(world.token),
    )
    assert ack.status_code == 200 and ack.json()["message"].startswith("ok "), ack.text
    views = []
    for entry in result["msgList"]:
        entry = dict(entry)
        stamp = entry.pop("timestamp", None)
        assert isinstance(stamp, int) and stamp > 0, entry
        views.append(entry)

    async def nothing_more() -> list[Any]:
        return await httpmq_probe(world, topic, conns)

    return views, nothing_more


def httpmq_view(sent: Sent, index: int, topic: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"messageId": httpmq_message_id(topic, 0, index)}
    try:
        entry["message"] = sent.body.decode("utf-8")
    except UnicodeDecodeError:
        entry["message"] = base64.b64encode(sent.body).decode("ascii")
        entry["encoding"] = "base64"
    if sent.properties:
        entry["properties"] = sent.properties
    return entry


async def httpmq_probe(world: World, topic: str, conns: Conns) -> list[Any]:
    """What an HTTP-MQ consumer of the group gets now; a lock it took is given back."""
    result = await _httpmq_fetch(world, topic, must=False)
    await _httpmq_unlock(world, topic, result)
    if result.get("status") == "NO_NEW_MSG" and "msgList" not in result:
        return []
    return [result]


async def httpmq_counts(world: World, topic: str) -> dict[str, int | str]:
    """The HTTP-MQ progress record's lag, the console API's and the console page's lag of
    the group."""
    name = world.consumer_name(topic)
    out: dict[str, int | str] = {}
    r = await world.mq.get(
        "/mq/clustering/queue/offset",
        params={"consumer": name},
        headers=bearer(world.catalog.console_token),
    )
    if r.status_code == 200:
        (record,) = r.json()["result"]
        out["httpmq queue/offset maxOffset - committedOffset"] = record["maxOffset"] - max(
            record["committedOffset"], 0
        )
    else:
        out["httpmq queue/offset"] = f"HTTP {r.status_code}: {r.text[:200]}"
    r = await world.console.get(f"/consumers/{name}/progress/")
    lag = re.search(r'id="total-lag" data-lag="(-?\d+)"', r.text)
    if r.status_code == 200 and lag:
        out["console page total lag"] = int(lag.group(1))
    else:
        out["console page"] = f"HTTP {r.status_code}: {r.text[:200]}"
    r = await world.web.get(
        f"/api/v1/consumers/{name}/progress/",
        headers={"Authorization": f"Token {world.catalog.console_token}"},
    )
    if r.status_code == 200:
        (row,) = r.json()
        out["console API progress lag"] = row["lag"]
    else:
        out["console API progress"] = f"HTTP {r.status_code}: {r.text[:200]}"
    return out


# ====================================================================== every count


class Counts:
    """Every place the group's numbers on one topic are visible: the engine's
    ``group_stats`` / ``queue_stats`` / progress lag, zbus admin ``data``, VibeMQ
    ``queueInfo`` over TCP and over WebSocket, the HTTP-MQ progress record and the console
    API's consumer progress."""

    def __init__(self, world: World, topic: str, conns: Conns) -> None:
        self.world, self.topic, self.conns = world, topic, conns
        self.vibemq: dict[str, VibeConn] = {}
        self._n = 0

    async def read(self) -> dict[str, Any]:
        w, topic = self.world, self.topic
        for transport in ("tcp", "ws"):
            if transport not in self.vibemq:
                self.vibemq[transport] = await vibemq_session(w, transport, self.conns)
        group = await w.engine.group_stats(topic, w.owner)
        queue = await w.engine.queue_stats(topic)
        (progress,) = await w.engine.progress(topic, w.owner)
        self._n += 1
        return {
            "engine group_stats backlog": group.backlog,
            "engine group_stats in_flight": group.in_flight,
            "engine group_stats retrying": group.retrying,
            "engine group_stats stored": group.stored,
            "engine queue_stats backlog": queue.backlog,
            "engine queue_stats in_flight": queue.in_flight,
            "engine progress lag": progress.lag,
            **await zbus_counts(w, topic, self.conns),
            **await vibemq_counts(self.vibemq["tcp"], "tcp", topic, self._n),
            **await vibemq_counts(self.vibemq["ws"], "ws", topic, self._n),
            **await httpmq_counts(w, topic),
        }

    @staticmethod
    def expected(waiting: int, stored: int) -> dict[str, Any]:
        return {
            "engine group_stats backlog": waiting,
            "engine group_stats in_flight": 0,
            "engine group_stats retrying": 0,
            "engine group_stats stored": stored,
            "engine queue_stats backlog": waiting,
            "engine queue_stats in_flight": 0,
            "engine progress lag": waiting,
            "zbus data unconsumedMsgCount": waiting,
            "zbus data inFlightMsgCount": 0,
            "vibemq-tcp queueInfo messageCount": waiting,
            "vibemq-tcp queueInfo inFlightCount": 0,
            "vibemq-ws queueInfo messageCount": waiting,
            "vibemq-ws queueInfo inFlightCount": 0,
            "httpmq queue/offset maxOffset - committedOffset": waiting,
            "console API progress lag": waiting,
            "console page total lag": waiting,
        }

    async def settle_at(self, waiting: int, stored: int, within: float = 3.0) -> list[str]:
        """Poll (bounded) until every count agrees; the disagreements otherwise."""
        want = self.expected(waiting, stored)
        deadline = time.monotonic() + within
        while True:
            got = await self.read()
            if got == want or time.monotonic() > deadline:
                break
        return [
            f"{key}: {got.get(key, '<missing>')!r}, expected {want.get(key, '<none>')!r}"
            for key in sorted(set(want) | set(got))
            if got.get(key) != want.get(key)
        ]


def diff(label: str, want: dict[str, Any], got: dict[str, Any]) -> str:
    """The fields where ``got`` differs from ``want``, both shown."""
    lines = [f"{label}:"]
    for key in sorted(set(want) | set(got)):
        if want.get(key, "<absent>") != got.get(key, "<absent>"):
            lines.append(
                f"    {key}: received {got.get(key, '<absent>')!r}\n"
                f"    {' ' * len(key)}  expected {want.get(key, '<absent>')!r}"
            )
    return "\n".join(lines)


def compare(
    consumer: str, producer: str, sent: list[Sent], got: list[dict], topic: str
) -> list[str]:
    """What differs between what ``consumer`` received and its view of each sent message."""
    problems = []
    view = VIEW[consumer]
    for i, s in enumerate(sent):
        want = view(s, i, topic)
        have = got[i] if i < len(got) else {}
        if have != want:
            problems.append(diff(f"{consumer} received {producer} message {s.label!r}", want, have))
    if len(got) != len(sent):
        problems.append(f"{consumer} received {len(got)} messages, {len(sent)} produced: {got}")
    return problems


async def stored_form(world: World, topic: str, producer: str, sent: list[Sent]) -> list[str]:
    """What differs between the stored records of ``topic`` and ``sent``, in order."""
    problems = []
    stored = await world.engine.read(topic, 0, 0, 32)
    for i, (s, d) in enumerate(zip(sent, stored, strict=False)):
        want = {"index": i, "body": s.body, "businessId": s.business_id, "properties": s.properties}
        got = {
            "index": d.index,
            "body": d.message.body,
            "businessId": d.message.business_id,
            "properties": dict(d.message.attributes),
        }
        if got != want:
            problems.append(diff(f"stored form of {producer} message {s.label!r}", want, got))
    if len(stored) != len(sent):
        problems.append(f"stored {len(stored)} records, produced {len(sent)} messages")
    return problems


async def settled_everywhere(
    world: World,
    topic: str,
    consumer: str,
    nothing_more: Callable[[], Awaitable[list[Any]]],
    counts: Counts,
    stored: int,
) -> list[str]:
    """After ``consumer`` acked: nothing comes again — to it, nor to a JMQ4 or an HTTP-MQ
    consumer of the group — every count says 0 waiting and 0 in flight, and the ack index
    is past the ``stored`` indexes."""
    problems = []
    again = await nothing_more()
    if again:
        problems.append(f"{consumer} got something again after acking: {again}")
    if consumer != "jmq4" and (extra := await jmq4_probe(world, topic, counts.conns)):
        problems.append(f"a JMQ4 fetch of the group after {consumer} acked got {extra}")
    if consumer != "httpmq" and (extra := await httpmq_probe(world, topic, counts.conns)):
        problems.append(f"an HTTP-MQ fetch of the group after {consumer} acked got {extra}")
    after = await counts.settle_at(waiting=0, stored=stored)
    if after:
        problems.append("counts after consuming (expected 0 waiting):\n  " + "\n  ".join(after))
    (progress,) = await world.engine.progress(topic, world.owner)
    if progress.ack_index != stored:
        problems.append(f"ack index {progress.ack_index} after consuming, expected {stored}")
    return problems


# ====================================================================== dispatch

Produce = Callable[[World, str, Conns], Awaitable[list[Sent]]]
Consume = Callable[[World, str, int, Conns], Awaitable[tuple[list[dict], Callable]]]

PRODUCE: dict[str, Produce] = {
    "jmq4": produce_jmq4,
    "zbus": produce_zbus,
    "vibemq-tcp": lambda w, t, c: produce_vibemq(w, "tcp", t, c),
    "vibemq-ws": lambda w, t, c: produce_vibemq(w, "ws", t, c),
    "httpmq": produce_httpmq,
}
CONSUME: dict[str, Consume] = {
    "jmq4": consume_jmq4,
    "zbus": consume_zbus,
    "vibemq-tcp": lambda w, t, n, c: consume_vibemq(w, "tcp", t, n, c),
    "vibemq-ws": lambda w, t, n, c: consume_vibemq(w, "ws", t, n, c),
    "httpmq": consume_httpmq,
}
VIEW: dict[str, Callable[[Sent, int, str], dict[str, Any]]] = {
    "jmq4": jmq4_view,
    "zbus": zbus_view,
    "vibemq-tcp": vibemq_view,
    "vibemq-ws": vibemq_view,
    "httpmq": httpmq_view,
}
