"""Produce and consume with raw bytes: both spellings, URI form, out-of-order replies."""

from __future__ import annotations

import pytest

from tests.zbus.conftest import Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)


async def test_produce_then_consume(raw: Raw, broker) -> None:
    await raw.send(msg("cmd: produce", "mq: orders", "msgid: p1", "token: ignored", body=b"hello"))
    ack = await raw.recv()
    assert ack.status == 200 and ack.msgid == "p1"
    assert int(ack.body) > 0 and ack.mq_reply
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
    got = await raw.recv()
    assert (got.status, got.msgid, got.msgid_raw, got.body) == (200, "c1", "p1", b"hello")
    assert "token" not in got.headers
    assert got.headers["remote-addr"].startswith("127.0.0.1:")
    assert got.headers["broker"] == f"127.0.0.1:{broker.port}"
    assert got.mq_reply == ack.mq_reply  # the producer's session id was stamped


async def test_uri_form_and_body_parameter(raw: Raw) -> None:
    await raw.send(msg(start="GET /orders?cmd=produce&&msgid=m1&&body=hello HTTP/1.1"))
    ack = await raw.recv()
    assert (ack.status, ack.msgid) == (200, "m1")
    await raw.send(msg(start="GET /orders?cmd=consume&&msgid=c1 HTTP/1.1"))
    got = await raw.recv()
    assert (got.body, got.msgid, got.msgid_raw) == (b"hello", "c1", "m1")
    assert "body" not in got.headers


async def test_header_wins_over_parameter(raw: Raw) -> None:
    await raw.send(
        msg(
            "mq: orders",
            "msgid: h1",
            start="GET /nothere?cmd=produce&&msgid=u1 HTTP/1.1",
            body=b"x",
        )
    )
    ack = await raw.recv()
    assert (ack.status, ack.msgid) == (200, "h1")


async def test_old_path_command_form(raw: Raw) -> None:
    await raw.send(msg("mq: orders", "msgid: p1", start="GET /produce HTTP/1.1", body=b"old"))
    assert (await raw.recv()).status == 200
    await raw.send(msg("mq: orders", "msgid: c1", start="POST /consume HTTP/1.1"))
    assert (await raw.recv()).body == b"old"


async def test_hyphen_and_id_spellings_are_written_back(raw: Raw) -> None:
    await raw.send(msg("cmd: produce", "mq: orders", "id: p9", "mq-reply: back", body=b"x"))
    ack = await raw.recv()
    assert ack.msgid == "p9"
    await raw.send(msg("cmd: consume", "mq: orders", "id: c9", "mq-reply: mine"))
    data = await raw.recv_raw()
    assert b"\r\nmsgid: c9\r\nid: c9\r\n" in data
    assert b"\r\nmsgid_raw: p9\r\nrawid: p9\r\n" in data
    assert b"\r\nmq_reply: back\r\nmq-reply: back\r\n" in data


async def test_out_of_order_reply_produce_overtakes_parked_consume(raw: Raw) -> None:
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
    assert await raw.silent(0.2)
    await raw.send(msg("cmd: produce", "mq: orders", "msgid: p1", body=b"late"))
    first, second = await raw.recv(), await raw.recv()
    by_id = {first.msgid: first, second.msgid: second}
    assert by_id["p1"].status == 200
    assert by_id["c1"].body == b"late" and by_id["c1"].msgid_raw == "p1"


async def test_response_shaped_produce_and_reply_code(raw: Raw) -> None:
    await raw.send(
        msg("cmd: produce", "mq: orders", "msgid: r1", start="HTTP/1.1 404 Not Found", body=b"a")
    )
    assert (await raw.recv()).status == 200
    await raw.send(msg("cmd: produce", "mq: orders", "msgid: r2", "reply_code: 500", body=b"b"))
    assert (await raw.recv()).status == 200
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1", "window: 2"))
    a, b = await raw.recv(), await raw.recv()
    assert (a.status, a.body) == (404, b"a")
    assert (b.status, b.body) == (500, b"b")


async def test_window_and_fifo_order(raw: Raw) -> None:
    for i in range(5):
        await raw.send(msg("cmd: produce", "mq: orders", f"msgid: p{i}", body=str(i).encode()))
    for _ in range(5):
        assert (await raw.recv()).status == 200
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1", "window: 3"))
    assert [(await raw.recv()).body for _ in range(3)] == [b"0", b"1", b"2"]
    assert await raw.silent(0.2)
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c2", "window: -1"))
    assert [(await raw.recv()).body for _ in range(2)] == [b"3", b"4"]
    await raw.send(msg("cmd: produce", "mq: orders", "msgid: p5", "ack: 0", body=b"5"))
    streamed = await raw.recv()
    assert (streamed.msgid, streamed.body) == ("c2", b"5")


async def test_window_zero_delivers_nothing(raw: Raw) -> None:
    await raw.send(msg("cmd: produce", "mq: orders", "msgid: p1", body=b"x"))
    await raw.recv()
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c0", "window: 0"))
    assert await raw.silent(0.3)


async def test_round_robin_between_sessions(broker) -> None:
    a, b = await Raw.open(broker.port), await Raw.open(broker.port)
    try:
        await a.send(msg("cmd: consume", "mq: orders", "msgid: a", "window: -1"))
        await b.send(msg("cmd: consume", "mq: orders", "msgid: b", "window: -1"))
        assert await a.silent(0.2)
        p = await Raw.open(broker.port)
        for i in range(4):
            await p.send(
                msg("cmd: produce", "mq: orders", "ack: 0", f"msgid: p{i}", body=str(i).encode())
            )
        got_a = [(await a.recv()).body for _ in range(2)]
        got_b = [(await b.recv()).body for _ in range(2)]
        assert sorted(got_a + got_b) == [b"0", b"1", b"2", b"3"]
        await p.close()
    finally:
        await a.close()
        await b.close()


async def test_heartbeat_and_ack_off_get_no_reply(raw: Raw) -> None:
    await raw.send(msg("cmd: heartbeat"))
    await raw.send(msg("cmd: produce", "mq: nothere", "msgid: x", "ack: 0", body=b"x"))
    await raw.send(msg("cmd: produce", "mq: secure", "msgid: y", "ack: false", body=b"x"))
    await raw.send(msg("cmd: produce", "mq: orders", "msgid: z", body=b"x"))
    got = await raw.recv()
    assert got.msgid == "z" and got.status == 200
    assert await raw.silent(0.2)
