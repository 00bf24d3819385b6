"""VibeMQ over WebSocket through a live daphne (§16), sharing queues with TCP."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from brokers.clients.vibemq import VibeMQClient


def ws_url(console_url: str) -> str:
    return console_url.replace("http://", "ws://") + "/ws/vibemq"


async def ws_open(console_url: str, **kwargs):
    return await websockets.connect(ws_url(console_url), **kwargs)


async def call(ws, frame: dict) -> dict:
    await ws.send(json.dumps(frame))
    return json.loads(await asyncio.wait_for(ws.recv(), 10))


async def ws_connect(console_url: str, token: str):
    ws = await ws_open(console_url, subprotocols=["vibemq"])
    assert ws.subprotocol == "vibemq"
    # the web process sees the test's catalog within its resync interval
    for _ in range(100):
        reply = await call(ws, {"id": "c", "type": "connect", "headers": {"authToken": token}})
        if reply["type"] == "connectAck":
            return ws
        await asyncio.sleep(0.1)
    raise AssertionError(f"connect failed: {reply}")


async def test_websocket_session_shares_queues_with_tcp(console_url, broker, catalog):
    ws = await ws_connect(console_url, catalog.token)
    try:
        ack = await call(ws, {"id": "w1", "type": "publish", "queue": "mixed", "payload": [1]})
        assert ack["type"] == "publishAck" and ack["headers"]["messageId"] == "w1"
        assert (await call(ws, {"id": "p", "type": "ping"}))["type"] == "pong"
        tcp = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
        await broker.watcher.refresh()
        await tcp.subscribe("mixed")
        got = await tcp.receive()
        assert (got.id, got.payload) == ("w1", [1])
        tcp.ack(got.id)
        sub = await call(ws, {"id": "s", "type": "subscribe", "queue": "mixed"})
        assert sub["type"] == "subscribeAck"
        await tcp.unsubscribe("mixed")
        await tcp.publish("mixed", {"from": "tcp"}, message_id="t1")
        deliver = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert deliver["type"] == "deliver" and deliver["id"] == "t1"
        assert deliver["payload"] == {"from": "tcp"}
        await ws.send(json.dumps({"id": "a", "type": "ack", "headers": {"messageId": "t1"}}))
        err = await call(ws, {"id": "bad", "type": "publish", "queue": "no way"})
        assert (err["id"], err["errorCode"]) == ("bad", "INVALID_QUEUE")
        info = await call(ws, {"id": "i", "type": "queueInfo", "queue": "mixed"})
        assert info["payload"]["messageCount"] == 0 and info["payload"]["inFlightCount"] == 0
        await tcp.close()
    finally:
        await ws.close()


async def test_a_round_of_deliveries_reaches_websocket_one_message_each(
    console_url, broker, catalog
):
    """What one dispatch round leases is framed together; over WebSocket each frame is
    still its own message (§16)."""
    tcp = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
    ws = await ws_connect(console_url, catalog.token)
    try:
        await broker.watcher.refresh()
        for i in range(5):
            await tcp.publish("mixed", {"n": i}, message_id=f"m{i}")
        sub = await call(ws, {"id": "s", "type": "subscribe", "queue": "mixed"})
        assert sub["type"] == "subscribeAck"
        got = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(5)]
        assert [(d["type"], d["id"], d["payload"]) for d in got] == [
            ("deliver", f"m{i}", {"n": i}) for i in range(5)
        ]
        for d in got:
            await ws.send(json.dumps({"id": "a", "type": "ack", "headers": {"messageId": d["id"]}}))
        info = await call(ws, {"id": "i", "type": "queueInfo", "queue": "mixed"})
        assert info["payload"]["messageCount"] == 0 and info["payload"]["inFlightCount"] == 0
    finally:
        await ws.close()
        await tcp.close()


async def test_websocket_auth_and_session_check(console_url, catalog):
    ws = await ws_open(console_url)
    try:
        assert ws.subprotocol is None  # not offered: not echoed
        err = await call(ws, {"id": "x", "type": "subscribe", "queue": "q"})
        assert err["errorCode"] == "NOT_AUTHENTICATED"
        err = await call(ws, {"id": "y", "type": "connect"})
        assert err["errorCode"] == "AUTH_REQUIRED"
        err = await call(ws, {"id": "z", "type": "connect", "headers": {"authToken": "bad"}})
        assert err["errorCode"] == "AUTH_FAILED"
    finally:
        await ws.close()


@pytest.mark.parametrize(
    ("send", "code", "error"),
    [
        (b"\x00\x01binary", 1003, False),
        ("{not json", 1007, True),
        ("[1]", 1007, True),
    ],
)
async def test_websocket_bad_input_closes_with_the_documented_code(console_url, send, code, error):
    ws = await ws_open(console_url, max_size=None, compression=None)
    await ws.send(send)
    if error:
        reply = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert reply["type"] == "error" and reply["errorCode"] == "INVALID_MESSAGE"
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), 10)
    assert ws.close_code == code


async def test_a_text_message_that_is_not_utf8_gets_the_error_then_1007(console_url, catalog):
    """§16: invalid UTF-8 → INVALID_MESSAGE, then close 1007 — as for bad JSON (Autobahn
    alone dropped the TCP connection without either). Before and after authenticating."""
    for authenticated in (False, True):
        if authenticated:
            ws = await ws_connect(console_url, catalog.token)
        else:
            ws = await ws_open(console_url, compression=None)
        await ws.send(b'{"id":"x","type":"ping","queue":"\xff\xfe"}', text=True)
        reply = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert reply["type"] == "error" and reply["errorCode"] == "INVALID_MESSAGE"
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1007


async def test_a_lone_surrogate_gets_a_per_request_error_and_no_close(console_url, catalog):
    """A JSON object whose payload holds a lone UTF-16 surrogate escape is valid JSON:
    INVALID_MESSAGE echoing the id, the socket open (before: a fresh id, then 1007)."""
    ws = await ws_connect(console_url, catalog.token)
    try:
        await ws.send('{"id":"ls1","type":"publish","queue":"lone","payload":"\\ud800"}')
        err = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert (err["id"], err["type"], err["errorCode"]) == ("ls1", "error", "INVALID_MESSAGE")
        assert err["errorMessage"].startswith("payload holds a lone UTF-16 surrogate")
        assert (await call(ws, {"id": "p", "type": "ping"}))["type"] == "pong"
    finally:
        await ws.close()


async def test_oversized_message_closes_the_socket_with_1009(console_url):
    """§16: a message over the size limit (1 MiB) → close 1009. The web process lets
    daphne take messages up to 2 MiB (the Procfile), so the consumer sees one over the
    limit and closes 1009 itself (daphne's own 1 MiB default dropped the TCP connection
    without a close frame); beyond 2 MiB daphne still cuts the connection, which is what
    protects the process's memory."""
    ws = await ws_open(console_url, max_size=None, compression=None)
    await ws.send("x" * 1_048_577)
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), 10)
    assert ws.close_code == 1009
    ws = await ws_open(console_url, max_size=None, compression=None)
    with pytest.raises(websockets.ConnectionClosed):  # cut while sending, or right after
        await ws.send("x" * 3_000_000)
        await asyncio.wait_for(ws.recv(), 10)


@pytest.fixture
async def in_process_endpoint(redis_client):
    """The consumer's engine and hub in this test's event loop, stopped afterwards."""
    import proxy.runtime
    from proxy.vibemq_ws import close_endpoint

    yield
    await close_endpoint()
    rt = proxy.runtime._runtime
    if rt is not None:
        await rt.watcher.stop()
        await rt.engine.close()
        await rt.redis.aclose()
        proxy.runtime._runtime = None


@pytest.mark.parametrize(
    ("kwargs", "code", "error"),
    [
        ({"bytes_data": b"\x00"}, 1003, False),
        ({"text_data": "x" * 1_048_577}, 1009, False),
        ({"text_data": "{bad"}, 1007, True),
    ],
)
async def test_consumer_close_codes(in_process_endpoint, kwargs, code, error):
    from channels.testing import WebsocketCommunicator

    from proxy.vibemq_ws import VibeMQConsumer

    comm = WebsocketCommunicator(VibeMQConsumer.as_asgi(), "/ws/vibemq", subprotocols=["vibemq"])
    connected, subprotocol = await comm.connect()
    assert connected and subprotocol == "vibemq"
    await comm.send_to(**kwargs)
    if error:
        reply = json.loads(await comm.receive_from(5))
        assert reply["errorCode"] == "INVALID_MESSAGE"
    assert await comm.receive_output(5) == {"type": "websocket.close", "code": code}
    await comm.disconnect()
