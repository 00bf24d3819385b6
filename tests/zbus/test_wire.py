"""Byte streams as the 2015 clients wrote them, and bad input (zbus.md §1, §12)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from brokers.clients.zbus import ZbusClient
from tests.zbus.conftest import TEST_CONFIG, Broker_, Raw

pytestmark = pytest.mark.django_db(transaction=True)

# zbus 5.x Java client: request line, headers in map order with underscores, content-length
JAVA_PRODUCE = (
    b"GET / HTTP/1.1\r\n"
    b"cmd: produce\r\n"
    b"mq: orders\r\n"
    b"msgid: 6f1c5c7e-2b7a-4b6e-9d55-3c1a0f1e9a01\r\n"
    b"mq_reply: 0c7d1a5e-1111-4f2b-8a11-222233334444\r\n"
    b"content-length: 11\r\n"
    b"\r\n"
    b"hello world"
)
JAVA_CONSUME = (
    b"GET / HTTP/1.1\r\n"
    b"cmd: consume\r\n"
    b"mq: orders\r\n"
    b"msgid: 9e2b0c44-5d1f-4f0e-8b3a-77aa00bb11cc\r\n"
    b"content-length: 0\r\n"
    b"\r\n"
)
# the Node.js client of the period: hyphenated names, Content-Length capitalised
NODE_REQUEST = (
    b"POST / HTTP/1.1\r\n"
    b"cmd: request\r\n"
    b"mq: svc\r\n"
    b"msgid: n-1\r\n"
    b"mq-reply: node-reply-q\r\n"
    b"Content-Length: 4\r\n"
    b"\r\n"
    b"ping"
)
# the Python 2 zbus-api worker: consume, then a response-shaped reply with ack off
PY2_WORKER_CONSUME = b"GET / HTTP/1.1\r\ncmd: consume\r\nmq: svc\r\nmsgid: w-1\r\n\r\n"


def py2_reply(mq_reply: str, msgid_raw: str) -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\ncmd: produce\r\nmq: {mq_reply}\r\nmsgid: {msgid_raw}\r\n"
        f"ack: 0\r\ncontent-length: 4\r\n\r\npong"
    ).encode()


async def test_java_client_bytes(raw: Raw) -> None:
    await raw.send(JAVA_PRODUCE + JAVA_CONSUME)  # pipelined in one write
    replies = {m.msgid: m for m in [await raw.recv(), await raw.recv()]}
    assert replies["6f1c5c7e-2b7a-4b6e-9d55-3c1a0f1e9a01"].status == 200
    got = replies["9e2b0c44-5d1f-4f0e-8b3a-77aa00bb11cc"]
    assert (got.body, got.msgid_raw) == (b"hello world", "6f1c5c7e-2b7a-4b6e-9d55-3c1a0f1e9a01")
    assert got.mq_reply == "0c7d1a5e-1111-4f2b-8a11-222233334444"


async def test_node_requester_and_python2_worker(broker) -> None:
    node, worker = await Raw.open(broker.port), await Raw.open(broker.port)
    try:
        await node.send(NODE_REQUEST)
        await worker.send(PY2_WORKER_CONSUME)
        call = await worker.recv()
        assert (call.msgid, call.msgid_raw, call.mq_reply, call.body) == (
            "w-1",
            "n-1",
            "node-reply-q",
            b"ping",
        )
        await worker.send(py2_reply(call.mq_reply, call.msgid_raw))
        data = await node.recv_raw()
        assert data.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"\r\nmsgid_raw: n-1\r\nmsgid-raw: n-1\r\n" in data  # the node peer's spelling too
        assert data.endswith(b"\r\ncontent-length: 4\r\n\r\npong")
    finally:
        await node.close()
        await worker.close()


async def test_malformed_lines_answer_400_and_keep_the_connection(raw: Raw) -> None:
    await raw.send(b"GARBAGE\r\nmsgid: g1\r\n\r\n")
    got = await raw.recv()
    assert (got.status, got.msgid, got.body) == (400, "g1", b"Bad format: malformed start line")
    await raw.send(b"GET / HTTP/1.1\r\n: empty name\r\nmsgid: g2\r\ncontent-length: 3\r\n\r\nabc")
    got = await raw.recv()
    assert (got.status, got.msgid, got.body) == (400, "g2", b"Bad format: malformed header")
    await raw.send(b"GET / HTTP/1.1\r\ncmd: produce\r\nmq: orders\r\nmsgid: ok\r\n\r\n")
    assert (await raw.recv()).msgid == "ok"


async def test_a_400_repeats_the_id_alias_the_request_used(raw: Raw) -> None:
    """§3: a request that named its id ``id`` gets it back under ``id`` too, the 400 of a
    message that could not be decoded included (the id from a URL parameter alike)."""
    for sent in (
        b"GET / HTTP/1.1\r\n: empty name\r\nid: g1\r\ncontent-length: 3\r\n\r\nabc",
        b"GET /?id=g1 HTTP/1.1\r\n: empty name\r\n\r\n",
    ):
        await raw.send(sent)
        got = await raw.recv_raw()  # as written: the helper's decoder folds aliases
        assert got.startswith(b"HTTP/1.1 400 ") and b"\r\nmsgid: g1\r\nid: g1\r\n" in got, got
    await raw.send(
        b"GET / HTTP/1.1\r\ncmd: produce\r\nmq: orders\r\ncontent-length: x\r\nid: g3\r\n\r\n"
    )
    got = await raw.recv_raw()
    assert got.startswith(b"HTTP/1.1 400 ") and b"\r\nid: g3\r\n" in got, got


async def test_bad_content_length_closes(raw: Raw) -> None:
    await raw.send(b"GET / HTTP/1.1\r\ncmd: produce\r\nmq: orders\r\ncontent-length: x1\r\n\r\n")
    got = await raw.recv()
    assert (got.status, got.body) == (400, b"Bad format: bad content-length")
    assert await raw.closed_by_peer()


async def test_short_body_at_eof_is_not_stored(broker) -> None:
    raw = await Raw.open(broker.port)
    await raw.send(
        b"GET / HTTP/1.1\r\ncmd: produce\r\nmq: orders\r\nmsgid: s\r\ncontent-length: 10\r\n\r\nabc"
    )
    raw.writer.write_eof()
    got = await raw.recv()
    assert (got.status, got.msgid, got.body) == (400, "s", b"Bad format: truncated message")
    await raw.close()
    async with ZbusClient("127.0.0.1", broker.port, timeout=5) as c:
        assert (await c.data())["mqTable"]["orders"]["unconsumedMsgCount"] == 0


async def test_size_limits(catalog, redis_url) -> None:
    b = Broker_(redis_url)
    await b.start(replace(TEST_CONFIG, max_body_bytes=100, max_head_bytes=256))
    try:
        raw = await Raw.open(b.port)
        await raw.send(
            b"GET / HTTP/1.1\r\ncmd: produce\r\nmq: orders\r\nmsgid: big\r\ncontent-length: 101\r\n\r\n"
        )
        got = await raw.recv()
        assert (got.status, got.msgid, got.body) == (400, "big", b"Bad format: message too large")
        assert await raw.closed_by_peer()
        await raw.close()
        raw = await Raw.open(b.port)
        await raw.send(b"GET / HTTP/1.1\r\nx: " + b"y" * 300 + b"\r\n\r\n")
        got = await raw.recv()
        assert (got.status, got.body) == (400, b"Bad format: message too large")
        assert await raw.closed_by_peer()
        await raw.close()
    finally:
        await b.stop()


async def test_the_default_body_limit_is_16_mib(broker) -> None:
    """zbus.md §1: "Body: 16 MiB, configurable" — a 5 MiB body is stored and delivered
    whole (the engine's body limit is zbus's; other protocols keep their own below it),
    and one past 16 MiB is refused."""
    body = bytes(range(256)) * (5 * 1024 * 4)  # 5 MiB
    raw = await Raw.open(broker.port)
    await raw.send(
        b"GET / HTTP/1.1\r\ncmd: produce\r\nmq: orders\r\nmsgid: five\r\n"
        b"content-length: %d\r\n\r\n" % len(body) + body
    )
    got = await raw.recv()
    assert (got.status, got.msgid) == (200, "five"), got
    await raw.send(b"GET / HTTP/1.1\r\ncmd: consume\r\nmq: orders\r\nmsgid: c1\r\n\r\n")
    got = await raw.recv()
    assert (got.status, len(got.body), got.body == body) == (200, len(body), True)
    await raw.send(
        b"GET / HTTP/1.1\r\ncmd: produce\r\nmq: orders\r\nmsgid: over\r\n"
        b"content-length: %d\r\n\r\n" % (16 * 1024 * 1024 + 1)
    )
    got = await raw.recv()
    assert (got.status, got.msgid, got.body) == (400, "over", b"Bad format: message too large")
    await raw.close()
