"""Admin: index page, jquery, data JSON, create_mq outcomes, track_sub (zbus.md §11)."""

from __future__ import annotations

import orjson
import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from brokers.clients.zbus import ZbusClient, ZbusError
from brokers.models import Topic
from brokers.topic_codes import code_for_name, is_topic_code
from tests.zbus.conftest import Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)


def _fields(code: str) -> tuple[int, int, str]:
    try:
        t = Topic.objects.get(code=code)
        return t.zbus_mode, t.partitions, t.creator
    finally:
        connection.close()


async def test_index_page_from_a_browser_address_bar(raw: Raw) -> None:
    await raw.send(
        msg(
            "Host: 127.0.0.1",
            "Connection: keep-alive",
            "User-Agent: Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0",
            "Accept: text/html,application/xhtml+xml",
            "Accept-Encoding: gzip, deflate, br",
        )
    )
    page = await raw.recv()
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    html = page.body.decode()
    assert "<title>ZBUS Admin</title>" in html and "ZBUS服务总线监控管理【" in html
    for name in ("orders", "news", "secure"):
        assert f'data-mq="{name}"' in html
    assert "pub/sub, permanent" in html and "10.0.0.1:1234" in html
    await raw.send(msg(start="GET /?cmd=admin&&method=index&&msgid=i1 HTTP/1.1"))
    page = await raw.recv()
    assert page.msgid == "i1" and b"ZBUS Admin" in page.body


async def test_browser_produce_from_address_bar_changes_count(raw: Raw) -> None:
    await raw.send(
        msg(
            "Host: 127.0.0.1",
            "User-Agent: Mozilla/5.0",
            start="GET /orders?cmd=produce&&body=hello HTTP/1.1",
        )
    )
    ack = await raw.recv()
    assert ack.status == 200 and ack.msgid is None
    await raw.send(msg(start="GET /?cmd=admin&&sub_cmd=data&&msgid=d HTTP/1.1"))
    data = orjson.loads((await raw.recv()).body)
    assert data["mqTable"]["orders"]["unconsumedMsgCount"] == 1


async def test_jquery_and_data_shape(raw: Raw, broker) -> None:
    await raw.send(msg("cmd: admin", "sub_cmd: jquery", "msgid: j"))
    got = await raw.recv()
    assert (got.status, got.msgid, got.headers["content-type"]) == (
        200,
        "j",
        "application/javascript",
    )
    await raw.send(msg("cmd: consume", "mq: news", "msgid: c", "topic: a,b"))
    for _ in range(50):  # the consume and the data request run concurrently
        await raw.send(msg("cmd: admin", "sub_cmd: data", "msgid: d"))
        got = await raw.recv()
        data = orjson.loads(got.body)
        if data["mqTable"]["news"]["consumerCount"]:
            break
    assert got.headers["content-type"] == "application/json"
    assert data["broker"] == f"127.0.0.1:{broker.port}"
    news = data["mqTable"]["news"]
    assert news["mode"] == 2 and news["consumerCount"] == 1
    assert news["consumerInfoList"][0]["topics"] == ["a", "b"]
    assert news["loadFactor"] == pytest.approx(0.000001)
    orders = data["mqTable"]["orders"]
    assert orders["consumerCount"] == 0 and orders["loadFactor"] == 1.7976931348623157e308
    assert orders["creator"] == "10.0.0.1:1234" and orders["createdTime"] > 0
    assert "consumerInfoList" in orders and "inFlightMsgCount" in orders


async def _news(conn: Raw) -> dict:
    """The ``news`` MqInfo of ``data`` asked on ``conn``."""
    await conn.send(msg("cmd: admin", "sub_cmd: data", "msgid: d"))
    return orjson.loads((await conn.recv()).body)["mqTable"]["news"]


async def _publish(conn: Raw, n: int) -> None:
    for i in range(n):
        await conn.send(msg("cmd: produce", "mq: news", f"msgid: p{i}", "topic: t", body=b"x"))
        assert (await conn.recv()).status == 200


async def test_pubsub_buffers_count_whatever_the_windows(broker) -> None:
    """§13.5: what waits in a subscriber's buffer counts while its window is 0 or used
    up. (The MQ's end was read only while some subscriber had window left: buffers
    filled behind it showed 0, the 5.x flaw.)"""
    idle, taker, p = [await Raw.open(broker.port) for _ in range(3)]
    try:
        for conn in (idle, taker):
            await conn.send(msg("cmd: consume", "mq: news", "msgid: s", "topic: *", "window: 0"))
        for _ in range(50):  # the consumes run concurrently with this test
            if (await _news(p))["subscriberCount"] == 2:
                break
        await _publish(p, 5)
        news = await _news(taker)
        assert (news["bufferedMsgCount"], news["unconsumedMsgCount"]) == (10, 10)
        await taker.send(msg("cmd: consume", "mq: news", "msgid: w", "window: 1"))
        assert (await taker.recv()).msgid == "w"
        await _publish(p, 3)
        news = await _news(p)
        assert (news["bufferedMsgCount"], news["subscriberCount"]) == (8 + 7, 2)
        await taker.send(msg("cmd: consume", "mq: news", "msgid: w", "window: -1"))
        assert len([await taker.recv() for _ in range(7)]) == 7
        assert (await _news(p))["bufferedMsgCount"] == 8  # the idle one's
    finally:
        for conn in (idle, taker, p):
            await conn.close()


async def test_create_mq_outcomes(broker) -> None:
    async with ZbusClient("127.0.0.1", broker.port, timeout=5) as c:
        created = await c.create_mq("fresh", 1, access_token="tok")
        assert int(created.body) > 0
        mode, partitions, creator = await sync_to_async(_fields)("fresh")
        assert (mode, partitions) == (1, 1) and creator.startswith("127.0.0.1:")
        assert (await c.produce("fresh", b"x", token="tok")).status == 200
        again = await c.create_mq("fresh", 1, access_token="other")
        assert again.status == 200
        assert (await c.produce("fresh", b"y", token="tok")).status == 200  # token unchanged
        cases = [
            ({"mqName": "fresh", "mqMode": 2}, "Bad format: Pubsub, type not matched"),
            ({"mqName": "news", "mqMode": 1}, "Bad format: MsgQueue, type not matched"),
            ({"mqName": "x", "mqMode": "q"}, "Bad format: mqMode invalid"),
            ({"mqMode": 1}, "Bad format: Missing mq_name filed"),
            ({"mqName": "a b", "mqMode": 1}, "Bad format: mqName invalid"),
            ({"mqName": "a/b", "mqMode": 1}, "Bad format: mqName invalid"),
            ({"mqName": "a?b", "mqMode": 1}, "Bad format: mqName invalid"),
            ({"mqName": "100%", "mqMode": 1}, "Bad format: mqName invalid"),
            ({"mqName": "k=v&x", "mqMode": 1}, "Bad format: mqName invalid"),
        ]
        for body, text in cases:
            reply = await c.invoke({"cmd": "admin", "sub_cmd": "create_mq"}, orjson.dumps(body))
            assert (reply.status, reply.body.decode()) == (400, text)
        reply = await c.invoke({"cmd": "admin", "sub_cmd": "create_mq"}, b"{nope")
        assert (reply.status, reply.body) == (400, b"Bad format: register param json body invalid")
        with pytest.raises(ZbusError):
            await c.create_mq("", 1)
        data = await c.data()
        assert data["mqTable"]["fresh"]["creator"].startswith("127.0.0.1:")
        for name in ("_private", "-dash", ".dot"):  # catalog codes as VibeMQ names (§13)
            assert (await c.create_mq(name, 1)).status == 200
            assert (await c.produce(name, b"z")).status == 200
        for name in (".", ".."):  # valid zbus names (§7), though no codes: their own codes
            assert (await c.create_mq(name, 1)).status == 200
            assert (await c.produce(name, b"dot")).status == 200


async def test_an_mq_name_a_topic_code_cannot_be_is_kept_as_the_topics_zbus_name(broker) -> None:
    """zbus.md §7: an MQ name is any 1–255 bytes of UTF-8 without whitespace, controls or
    ``/ ? & = %`` — ``:``, ``*``, ``{`` and letters beyond ASCII included. Such an MQ is a
    topic with a code derived from its name; zbus clients call it by the name (create
    again, produce, consume, the admin data), other protocols and the console by the code."""
    names = ["order:created", "订单", "bad*chars", "{tag}", "a.b:c", "é" * 127]
    async with ZbusClient("127.0.0.1", broker.port, timeout=5) as c:
        for name in names:
            assert (await c.create_mq(name, 1)).status == 200, name
            assert (await c.create_mq(name, 1)).status == 200, name  # exists: 200 again
            assert (await c.produce(name, name.encode())).status == 200, name
        rows = await sync_to_async(_zbus_names)()
        for name in names:
            code = rows[name]
            assert code != name and is_topic_code(code) and code == code_for_name(name)
        assert rows["order:created"].startswith("order_created-")
        assert rows["订单"].startswith("mq-")
        data = await c.data()
        assert set(names) <= set(data["mqTable"]) and not set(rows.values()) & set(data["mqTable"])
        assert data["mqTable"]["订单"]["unconsumedMsgCount"] == 1
        for name in names:
            got = await c.consume(name, window=1)
            assert (got.status, got.body) == (200, name.encode()), name
        # the code reaches the same MQ (what JMQ4, VibeMQ and HTTP-MQ clients use)
        assert (await c.produce(rows["订单"], b"by code")).status == 200
        got = await c.consume("订单", window=1)
        assert got.body == b"by code"
        body = orjson.dumps({"mqName": "订单", "mqMode": 2})  # its mode is the existing MQ's
        wrong = await c.invoke({"cmd": "admin", "sub_cmd": "create_mq"}, body)
        assert (wrong.status, wrong.body) == (400, b"Bad format: Pubsub, type not matched")


def _zbus_names() -> dict[str, str]:
    try:
        return dict(Topic.objects.exclude(zbus_name=None).values_list("zbus_name", "code"))
    finally:
        connection.close()


async def test_track_sub(broker) -> None:
    async with ZbusClient("127.0.0.1", broker.port, timeout=5) as c:
        reply = await c.invoke({"cmd": "track_sub", "x-echo": "yes"})
        assert reply.status == 200 and reply.headers["x-echo"] == "yes"
        table = orjson.loads(reply.body)
        address = f"127.0.0.1:{broker.port}"
        assert address in table["brokerTable"]
        assert [i["broker"] for i in table["mqTable"]["orders"]] == [address]
        await c.create_mq("pushed", 1)
        push = await c.unmatched.get()
        assert push.headers["cmd"] == "track_pub"
        assert "pushed" in orjson.loads(push.body)["mqTable"]


async def test_index_pages_and_filters_on_the_server(raw: Raw, monkeypatch) -> None:
    """The index shows PAGE_SIZE MQs at a time; ?q= filters by name, ?page= pages, and a
    bad page number gives a page, not an error; data takes the same parameters."""
    from brokers.servers.zbus import index

    monkeypatch.setattr(index, "PAGE_SIZE", 2)
    await raw.send(msg(start="GET /?page=2 HTTP/1.1"))
    html = (await raw.recv()).body.decode()
    assert 'data-mq="secure"' in html and 'data-mq="news"' not in html
    assert "page 2 of 2" in html and 'rel="prev"' in html and 'href="/"' in html
    await raw.send(msg(start="GET /?q=NEW HTTP/1.1"))
    html = (await raw.recv()).body.decode()
    assert 'data-mq="news"' in html and 'data-mq="orders"' not in html
    for bad in ("abc", "-3", "99999999", "1x", "%C2%B2"):  # "²" passes str.isdigit
        await raw.send(msg(start=f"GET /?page={bad}&&q=%3Cscript%3E HTTP/1.1"))
        page = await raw.recv()
        assert page.status == 200 and "&lt;script&gt;" in page.body.decode()
    await raw.send(msg(start="GET /?cmd=admin&&sub_cmd=data&&q=ord&&msgid=d HTTP/1.1"))
    assert list(orjson.loads((await raw.recv()).body)["mqTable"]) == ["orders"]
    await raw.send(msg(start="GET /?cmd=admin&&sub_cmd=data&&page=%C2%B2&&msgid=s HTTP/1.1"))
    assert (await raw.recv()).status == 200
    await raw.send(msg(start="GET /?cmd=admin&&sub_cmd=data&&msgid=e HTTP/1.1"))
    assert {"orders", "news", "secure"} <= set(orjson.loads((await raw.recv()).body)["mqTable"])


def test_an_open_admin_is_warned_of_only_beyond_loopback() -> None:
    from brokers.servers.zbus.server import _loopback

    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("10.1.2.3") and not _loopback("::")
