"""One broker, several processes on its port (``runbroker --processes``: SO_REUSEPORT):
``data`` answers with the consumers and pub/sub buffers of all of them, whichever process
the asking connection landed on; a sibling that does not answer delays it boundedly, one
that is gone not at all (zbus.md §11.2, §13.5)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import orjson
import pytest

from brokers.servers.zbus import census
from tests.zbus.conftest import Broker_, Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)


@contextlib.asynccontextmanager
async def two_processes(redis_url: str) -> AsyncIterator[tuple[Broker_, Broker_]]:
    """Two zbus servers of broker 1 sharing one port (two processes in production)."""
    first, second = Broker_(redis_url), Broker_(redis_url)
    await first.start(reuse_port=True)
    try:
        await second.start(port=first.port, reuse_port=True)
        try:
            yield first, second
        finally:
            await second.stop()
    finally:
        await first.stop()


async def _landed(port: int, brokers: tuple[Broker_, ...], each: int) -> list[list[Raw]]:
    """Connections to ``port``, ``each`` of them held by every one of ``brokers`` (the
    kernel spreads connections by their address: opened until each got its share)."""
    held: list[list[Raw]] = [[] for _ in brokers]
    spare: list[Raw] = []
    for _ in range(200):
        if all(len(h) >= each for h in held):
            break
        conn = await Raw.open(port)
        host, local = conn.writer.get_extra_info("sockname")[:2]
        address = f"{host}:{local}"
        owner = None
        for _ in range(200):  # accepted a moment after the connect returned
            owner = next(
                (
                    i
                    for i, b in enumerate(brokers)
                    if any(p.conn.remote_addr == address for p in b.server._connections)
                ),
                None,
            )
            if owner is not None:
                break
            await asyncio.sleep(0.01)
        assert owner is not None
        (held[owner] if len(held[owner]) < each else spare).append(conn)
    for conn in spare:
        await conn.close()
    assert all(len(h) >= each for h in held)
    return held


async def _data(conn: Raw) -> dict:
    await conn.send(msg("cmd: admin", "sub_cmd: data", "msgid: d"))
    return orjson.loads((await conn.recv()).body)["mqTable"]


def _summary(table: dict) -> tuple:
    news, orders = table["news"], table["orders"]
    return (
        news["consumerCount"],
        news["subscriberCount"],
        news["bufferedMsgCount"],
        orders["consumerCount"],
        sorted(c["remoteAddr"] for c in orders["consumerInfoList"]),
    )


async def test_data_counts_the_consumers_of_every_process_of_the_broker(
    catalog, redis_url, monkeypatch
) -> None:
    async with two_processes(redis_url) as (first, second):
        (a, a_asker), (b, b_asker) = await _landed(first.port, (first, second), 2)
        consumers = [a, b]
        try:
            for conn in consumers:
                lines = ("mq: news", "msgid: s", "topic: *", "window: 0")
                await conn.send(msg("cmd: consume", *lines))
                await conn.send(msg("cmd: consume", "mq: orders", "msgid: q", "window: 1"))
            addresses = sorted(
                "{}:{}".format(*c.writer.get_extra_info("sockname")[:2]) for c in consumers
            )
            for _ in range(100):  # the consumes run concurrently with this test
                if _summary(await _data(a_asker))[:2] == (2, 2):
                    break
                await asyncio.sleep(0.01)
            for _ in range(3):
                await a_asker.send(msg("cmd: produce", "mq: news", "msgid: p", body=b"x"))
                assert (await a_asker.recv()).status == 200
            # both processes answer for both: buffers of window-0 subscribers included
            want = (2, 2, 6, 2, addresses)
            assert _summary(await _data(a_asker)) == want
            assert _summary(await _data(b_asker)) == want
            assert (await _data(b_asker))["orders"]["loadFactor"] == pytest.approx(0.0000005)
            # a sibling that hears but does not answer: counted without, within the wait
            monkeypatch.setattr(census, "WAIT_S", 0.3)
            monkeypatch.setattr(second.server.ctx.census, "_asked", lambda _data: None)
            await second.server.ctx.census.stop()
            await second.server.ctx.census.start()  # (re)joined with the silent handler
            assert _summary(await _data(a_asker))[:4] == (1, 1, 3, 1)
            # a sibling that is gone is not waited for
            monkeypatch.setattr(census, "WAIT_S", 30.0)
            await b.close()
            await second.server.ctx.census.stop()
            async with asyncio.timeout(5):
                assert _summary(await _data(a_asker))[:4] == (1, 1, 3, 1)
        finally:
            for conn in (a, a_asker, b, b_asker):
                await conn.close()
