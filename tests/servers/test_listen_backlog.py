"""A fleet reconnecting at once gets its connections while the broker's loop is busy.

Each protocol port is opened by 400 clients while the broker's event loop cannot accept
(the test blocks it, as a busy broker's loop is between two polls): every connection must
complete in the kernel's accept queue at once. With asyncio's default backlog (100) the
kernel dropped the handshakes past it, and each of those clients waited for its SYN to be
sent again (1 s, 3 s, 7 s …): a broker restart left part of a fleet without its
connection for seconds. Once the loop runs again the broker takes every one of them.
"""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from brokers.engine import (
    BrokerInfo,
    CatalogSnapshot,
    CatalogWatcher,
    Engine,
    publish_snapshot,
)
from brokers.engine.redisio import broker_client
from brokers.servers.jmq4 import start_jmq4_server
from brokers.servers.vibemq import start_vibemq_server
from brokers.servers.zbus import start_zbus_server
from tests.access.conftest import until

CLIENTS = 400
"""Well past asyncio's default backlog, well under the kernel's default somaxconn (4096)."""
CONNECT_WAIT_S = 0.5
"""Less than the first SYN retransmit (1 s): a dropped handshake does not complete in it."""

Start = Callable[[Engine, CatalogWatcher], Awaitable[object]]
SERVERS: dict[str, Start] = {
    "jmq4": lambda engine, watcher: start_jmq4_server(engine, watcher, "127.0.0.1", 0, 1),
    "zbus": lambda engine, watcher: start_zbus_server(engine, watcher, "127.0.0.1", 0, 1),
    "vibemq": lambda engine, watcher: start_vibemq_server(engine, watcher, "127.0.0.1", 0, 1),
}


def _snapshot() -> CatalogSnapshot:
    broker = BrokerInfo(id=1, host="127.0.0.1", jmq4_port=0, zbus_port=0, vibemq_port=0)
    return CatalogSnapshot(version=1, brokers={1: broker}, topics={}, apps={})


@pytest.fixture(params=sorted(SERVERS))
async def server(request, redis_client, redis_url: str) -> AsyncIterator[object]:
    """One protocol server of broker 1, on a free loopback port."""
    client = broker_client(redis_url, max_connections=8)
    await publish_snapshot(client, _snapshot())
    watcher = CatalogWatcher(client, resync_interval=0.5)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current, broker_id=1)
    started = await SERVERS[request.param](engine, watcher)
    try:
        yield started
    finally:
        await started.stop()
        await engine.close()
        await watcher.stop()
        await client.aclose()


def _connect_all(port: int, count: int, wait: float) -> tuple[list[socket.socket], int]:
    """Open ``count`` connections to ``port`` at once without letting the event loop run;
    (every socket, how many completed their handshake within ``wait`` seconds)."""
    socks: list[socket.socket] = []
    with selectors.DefaultSelector() as selector:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            socks.append(sock)
            selector.register(sock, selectors.EVENT_WRITE)
        connected = 0
        deadline = time.monotonic() + wait
        while selector.get_map() and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                selector.unregister(key.fileobj)
                if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    connected += 1
    return socks, connected


async def test_a_burst_of_connections_completes_while_the_loop_is_busy(server) -> None:
    # synchronous on purpose: the broker's loop (this one) accepts nothing meanwhile
    socks, connected = _connect_all(server.port, CLIENTS, CONNECT_WAIT_S)
    try:
        assert connected == CLIENTS
        await until(
            lambda: server.connections == CLIENTS,
            within=10,
            what=lambda: f"{server.connections} of {CLIENTS} connections taken by the broker",
        )
    finally:
        for sock in socks:
            sock.close()
