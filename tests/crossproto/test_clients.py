"""The clients of an app, listed the same way whatever protocol they speak: a client
that produced and consumed over one protocol shows under that protocol with the
language and version it stated (JMQ4 ADD_CONNECTION, VibeMQ ``clientVersion``, the
HTTP-MQ User-Agent), its live connections while it is connected, and both topics'
roles; closed, it is still listed with what it did, and no connection."""

from __future__ import annotations

import httpx
import pytest

from brokers.engine import ClientRow
from tests.access.conftest import until
from tests.crossproto.conftest import PROTOCOLS, World
from tests.crossproto.wire import CONSUME, PRODUCE, VIBEMQ_CLIENT_VERSION, Conns

pytestmark = [pytest.mark.asyncio(loop_scope="package"), pytest.mark.django_db]

KIND = {
    "jmq4": ("jmq4", "JAVA", ""),
    "zbus": ("zbus", "", ""),
    "vibemq-tcp": ("vibemq", "", VIBEMQ_CLIENT_VERSION),
    "vibemq-ws": ("vibemq-ws", "", VIBEMQ_CLIENT_VERSION),
    "httpmq": ("http-mq", "", f"python-httpx/{httpx.__version__}"),
}
CONNECTED = {"jmq4", "zbus", "vibemq-tcp", "vibemq-ws"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_client_is_listed_by_its_protocol_with_what_it_did(
    protocol: str, world: World, conns: Conns
):
    topic = f"x.edge.clients.{protocol}"
    kind = KIND[protocol]
    sent = await PRODUCE[protocol](world, topic, conns)
    got, _ = await CONSUME[protocol](world, topic, len(sent), conns)
    assert len(got) == len(sent), got

    async def row() -> ClientRow | None:
        wanted = {(topic, "produce"), (topic, "consume")}
        for r in (await world.engine.clients_of([world.owner]))[world.owner]:
            did = {(t, role) for t, role, _ in r.topics}
            if (r.protocol, r.language, r.version) == kind and did >= wanted:
                return r
        return None

    async def listed() -> bool:
        r = await row()
        return r is not None and (r.connections > 0 or protocol not in CONNECTED)

    await until(listed, within=10, what=f"{protocol} client listed with {kind}")
    for conn in conns:
        await conn.close()
    conns.clear()

    async def disconnected() -> bool:
        r = await row()
        return r is not None and r.connections == 0

    await until(disconnected, within=10, what=f"{protocol} connections withdrawn")
    inventory = {
        (i.protocol, i.language, i.version): i for i in await world.engine.client_inventory()
    }
    assert world.owner in inventory[kind].apps


async def test_produce_latency_counts_every_protocols_messages_per_client_host(
    world: World, conns: Conns
):
    """The producer statistics are the engine's: a message produced over any protocol is
    counted for the app and the client's host (its connection's port left out), on
    whichever broker stored it. (The window is the last whole hour and the current
    one: a test run across the hour still finds its messages.) Every protocol produces
    first, then each count is awaited: each broker writes its counts every FLUSH_S
    (10 s), so the waits overlap instead of adding up."""
    sent = {p: await PRODUCE[p](world, f"x.edge.latency.{p}", conns) for p in PROTOCOLS}

    for protocol, messages in sent.items():
        topic = f"x.edge.latency.{protocol}"

        async def counted(topic: str = topic, n: int = len(messages)) -> bool:
            found = await world.engine.produce_latency([(topic, world.owner)], 1)
            row = found.get((topic, world.owner, "127.0.0.1"))
            return row is not None and row.messages == n and row.failed == 0

        await until(counted, within=30, what=f"{len(messages)} {protocol} messages counted")
        found = await world.engine.produce_latency([(topic, world.owner)], 1)
        assert list(found) == [(topic, world.owner, "127.0.0.1")], protocol
        assert found[(topic, world.owner, "127.0.0.1")].percentile(0.5) is not None, protocol
