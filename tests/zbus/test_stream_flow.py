"""A streaming consumer (``window: -1``) is written to as fast as it reads, no faster."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import types

import pytest

from brokers.engine import Message as EngineMessage
from brokers.servers.zbus import ZbusConfig
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.queue import InFlight, QueueMq
from tests.zbus.conftest import Broker_, Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)

COUNT = 20_000
BODY = b"x" * 2000  # 40 MB in all: more than the kernel's socket buffers hold


async def _in_flight(server: Broker_) -> int:
    app = server.engine.catalog.consumers_of("orders")[0].app
    return (await server.engine.group_stats("orders", app)).in_flight


async def _slow_reader(port: int) -> Raw:
    """A connection with a small receive buffer that reads only when told."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
    return Raw(reader, writer)


async def test_a_streaming_consumer_that_does_not_read_holds_back_the_backlog(
    catalog, redis_url
) -> None:
    """While the peer does not read, the broker stops dealing to its sessions (the
    transport asked it to pause writing): a backlog of millions does not move into the
    broker's memory and stay leased. Once it reads, every message comes, in order."""
    server = Broker_(redis_url)
    await server.start()
    app = server.engine.catalog.consumers_of("orders")[0].app
    for start in range(0, COUNT, 1000):
        batch = [
            EngineMessage(BODY, attributes={"msgid": f"m{i}"}) for i in range(start, start + 1000)
        ]
        await server.engine.append("orders", app, batch)
    raw = await _slow_reader(server.port)
    try:
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: s", "window: -1"))
        await asyncio.sleep(2.0)
        held = await _in_flight(server)
        assert 0 < held < COUNT // 4, held  # socket buffers and a batch, not the backlog
        seen = []
        while len(seen) < COUNT:
            got = await raw.recv(10.0)
            seen.append(got.headers["msgid_raw"])
        assert seen == [f"m{i}" for i in range(COUNT)]
    finally:
        await raw.close()
        await server.stop()


async def test_a_subscriber_that_does_not_read_is_not_written_to(catalog, redis_url) -> None:
    """A pub/sub subscriber whose peer stopped reading keeps its place in the stream (its
    buffer, the oldest dropped beyond ``pubsub_buffer``) instead of having every publish
    written into the broker's memory for it; once it reads, what its buffer kept comes,
    in order."""
    server = Broker_(redis_url)
    await server.start()
    app = server.engine.catalog.consumers_of("news")[0].app
    raw = await _slow_reader(server.port)
    try:
        await raw.send(msg("cmd: consume", "mq: news", "msgid: s", "topic: *", "window: -1"))
        pubsubs = server.server.ctx.pubsubs
        for _ in range(100):
            if "news" in pubsubs and pubsubs["news"].subscribers:
                break
            await asyncio.sleep(0.02)
        for start in range(0, COUNT, 1000):
            batch = [
                EngineMessage(BODY, attributes={"msgid": f"n{i}"})
                for i in range(start, start + 1000)
            ]
            await server.engine.append("news", app, batch)
        await asyncio.sleep(2.0)
        [proto] = server.server._connections
        assert proto.conn.buffered() < 4 * 1024 * 1024  # not the 40 MB published
        seen: list[int] = []
        with contextlib.suppress(TimeoutError):
            while True:
                seen.append(int((await raw.recv(1.0)).headers["msgid_raw"][1:]))
        assert seen == sorted(set(seen)) and seen[-1] == COUNT - 1
        dropped = server.server.ctx.pubsubs["news"].subscribers[proto.conn].dropped
        assert dropped > 0 and len(seen) + dropped == COUNT
    finally:
        await raw.close()
        await server.stop()


async def test_what_a_streaming_consumer_read_is_settled(catalog, redis_url) -> None:
    """Deliveries of a streaming session are settled once its transport drained: after
    the consumer read everything, nothing stays in flight — not until its next consume
    (a streaming client sends none) nor until the lease ends (10 minutes, then delivered
    again)."""
    server = Broker_(redis_url)
    await server.start()
    app = server.engine.catalog.consumers_of("orders")[0].app
    for start in range(0, 2000, 500):
        batch = [
            EngineMessage(b"m", attributes={"msgid": f"m{i}"}) for i in range(start, start + 500)
        ]
        await server.engine.append("orders", app, batch)
    raw = await Raw.open(server.port)
    try:
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: s", "window: -1"))
        for _ in range(2000):
            await raw.recv(5.0)
        for _ in range(100):
            if await _in_flight(server) == 0:
                break
            await asyncio.sleep(0.05)
        assert await _in_flight(server) == 0
    finally:
        await raw.close()
        await server.stop()


async def test_a_stream_that_does_not_drain_is_looked_at_less_and_less() -> None:
    """A peer that stopped reading with fewer bytes waiting than the transport's high-water
    mark never makes it pause writing: its deliveries are looked at again twice as late
    each time (not every 5 ms while it stalls), and settled once it drained."""
    settled: list[str] = []
    ctx = types.SimpleNamespace(
        config=ZbusConfig(drain_check_delay=0.005),
        spawn=lambda coro, name: (settled.append(name), coro.close()),
    )
    mq = QueueMq(ctx, "orders")  # type: ignore[arg-type]
    waiting = [100]
    conn = Connection("10.0.0.1:5", lambda data: True, buffered=lambda: waiting[0])
    mq.inflight[conn] = [InFlight("app", 0, 1, 0.0, 0.0, True)]
    mq._streams.add(conn)
    looks = 0
    check = mq._check_streams

    def counted() -> None:
        nonlocal looks
        looks += 1
        check()

    mq._check_streams = counted  # type: ignore[method-assign]
    mq._settle_streams()
    await asyncio.sleep(1.0)
    assert 3 <= looks <= 10, looks  # 5, 10, 20, … ms: not 200 looks a second
    waiting[0] = 0
    for _ in range(40):
        if conn not in mq.inflight and settled:
            break
        await asyncio.sleep(0.05)
    assert conn not in mq.inflight and settled == ["zbus-settle-orders"]
