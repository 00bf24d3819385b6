"""Who may do what over JMQ4, through raw frames on a real socket (jmq4.md §6.1, §7, §8.5).

Every refusal is checked on the wire (the spec's status or entry code) and in the store: a
refused produce stores nothing, a refused fetch reads, locks and acks nothing, and the
message stays there for the rightful consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from brokers.clients.jmq4 import OutgoingMessage, build_message
from brokers.protocols.jmq4 import (
    AckEntry,
    AckPartition,
    AckTopic,
    AddConsumerRequest,
    AddProducerRequest,
    BrokerMessage,
    Code,
    CommandType,
    CommitAckRequest,
    FetchPartitionMessageRequest,
    FetchTopicMessageRequest,
    Frame,
    PartitionFetch,
    PartitionFetchTopic,
    PrepareRequest,
    ProduceMessageRequest,
    ProduceTopic,
    TopicFetch,
)
from brokers.servers.jmq4 import ServerConfig
from tests.access.conftest import (
    LIMITS,
    LOOPBACK_HOST,
    LOOPBACK_NET,
    WRONG_TOKEN,
    Catalog,
    Seen,
    Store,
    change,
    rotate_owner_token,
    seen_by,
)
from tests.jmq4.conftest import Broker_
from tests.jmq4.raw import RawClient, frame_bytes

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def broker(catalog: Catalog, redis_url: str) -> AsyncIterator[Broker_]:
    """A JMQ4 server for broker 1 (the leader of every partition) on the catalog's port."""
    b = Broker_(1, catalog.jmq4_port, redis_url)
    await b.start(ServerConfig(max_inflight=16, shutdown_grace=1.0))
    try:
        yield b
    finally:
        await b.stop()


@pytest.fixture
def seen(broker: Broker_) -> Seen:
    return seen_by(broker.watcher)


@pytest.fixture
async def conns(broker: Broker_) -> AsyncIterator[list[RawClient]]:
    opened: list[RawClient] = []
    yield opened
    for c in opened:
        await c.close()


async def connect(
    catalog: Catalog, conns: list[RawClient], app: str, token: str
) -> tuple[RawClient, Frame]:
    """A raw connection and the answer to its ADD_CONNECTION."""
    raw = await RawClient.open(catalog.jmq4_port)
    conns.append(raw)
    return raw, await raw.login(app, token)


async def owner(catalog: Catalog, conns: list[RawClient]) -> RawClient:
    """A connection of the topic's owner app, registered as producer and consumer."""
    raw, reply = await connect(catalog, conns, catalog.owner, catalog.owner_token)
    assert reply.header.status == 0
    for request in (
        AddProducerRequest(topics=(catalog.topic,), app=catalog.owner),
        AddConsumerRequest(topics=(catalog.topic,), app=catalog.owner),
    ):
        assert (await raw.call(request)).header.status == 0
    return raw


def produce(topic: str, app: str, *bodies: bytes) -> ProduceMessageRequest:
    messages = tuple(
        build_message(OutgoingMessage(b), app=app, partition=0, compress=False) for b in bodies
    )
    return ProduceMessageRequest(topics=(ProduceTopic(topic=topic, messages=messages),), app=app)


def prepare(topic: str, app: str) -> PrepareRequest:
    return PrepareRequest(topic=topic, app=app, transaction_id="query-1", timeout=60_000)


def fetch_topic(topic: str, app: str) -> FetchTopicMessageRequest:
    return FetchTopicMessageRequest(topics=(TopicFetch(topic=topic, count=10),), app=app)


def fetch_partition(topic: str, app: str) -> FetchPartitionMessageRequest:
    return FetchPartitionMessageRequest(
        topics=(
            PartitionFetchTopic(
                topic=topic, partitions=(PartitionFetch(partition=0, count=10, index=0),)
            ),
        ),
        app=app,
    )


def ack(topic: str, app: str, messages: tuple[BrokerMessage, ...]) -> CommitAckRequest:
    entries = tuple(AckEntry(partition=m.partition, index=m.index) for m in messages)
    return CommitAckRequest(
        topics=(AckTopic(topic=topic, partitions=(AckPartition(partition=0, acks=entries),)),),
        app=app,
    )


async def produced_code(raw: RawClient, request: ProduceMessageRequest) -> int:
    reply = await raw.call(request)
    assert reply.header.type == CommandType.PRODUCE_MESSAGE_RESPONSE, reply.header
    (entry,) = reply.payload.topics
    if entry.code != 0:
        assert all(item.index == -1 for item in entry.items)
    return entry.code


async def fetched(raw: RawClient, request) -> tuple[int, tuple[BrokerMessage, ...]]:
    """(code, messages) of a one-topic FETCH_TOPIC_MESSAGE or FETCH_PARTITION_MESSAGE."""
    reply = await raw.call(request)
    (entry,) = reply.payload.topics
    if isinstance(request, FetchPartitionMessageRequest):
        (entry,) = entry.partitions
    return entry.code, tuple(entry.messages)


async def owner_consumes(raw: RawClient, catalog: Catalog, *bodies: bytes) -> None:
    """The owner fetches exactly ``bodies`` and acks them."""
    code, messages = await fetched(raw, fetch_topic(catalog.topic, catalog.owner))
    assert code == 0 and [m.body for m in messages] == list(bodies)
    reply = await raw.call(ack(catalog.topic, catalog.owner, messages))
    assert [p.code for t in reply.payload.topics for p in t.partitions] == [0]


# ---------------------------------------------------------------------- 1, 2: no or bad token


@pytest.mark.parametrize(
    "who",
    ["no token", "wrong token", "another app's valid token"],
)
async def test_login_without_a_valid_token_is_status_2_and_nothing_passes(
    who: str, catalog: Catalog, broker, conns, store: Store
):
    token = {
        "no token": "",
        "wrong token": WRONG_TOKEN,
        "another app's valid token": catalog.stranger_token,
    }[who]
    producer = await owner(catalog, conns)
    assert await produced_code(producer, produce(catalog.topic, catalog.owner, b"seed")) == 0
    before = await store.state(catalog.topic), await store.progress(catalog.topic, catalog.owner)

    raw, reply = await connect(catalog, conns, catalog.owner, token)
    assert reply.header.type == CommandType.BOOLEAN_ACK
    assert reply.header.status == Code.CN_AUTHENTICATION_ERROR
    # the connection was not established: every command carrying the app is refused
    for request in (
        AddProducerRequest(topics=(catalog.topic,), app=catalog.owner),
        produce(catalog.topic, catalog.owner, b"intruder"),
        fetch_topic(catalog.topic, catalog.owner),
        fetch_partition(catalog.topic, catalog.owner),
    ):
        refused = await raw.call(request)
        assert refused.header.type == CommandType.BOOLEAN_ACK
        assert refused.header.status == Code.FW_CONNECTION_NOT_EXISTS

    after = await store.state(catalog.topic), await store.progress(catalog.topic, catalog.owner)
    assert after == before
    await owner_consumes(producer, catalog, b"seed")


# ---------------------------------------------------------------------- 3: another team's app


async def test_another_teams_app_may_neither_produce_nor_consume(
    catalog: Catalog, broker, conns, store: Store
):
    producer = await owner(catalog, conns)
    assert await produced_code(producer, produce(catalog.topic, catalog.owner, b"seed")) == 0
    before = await store.state(catalog.topic), await store.progress(catalog.topic, catalog.owner)

    raw, reply = await connect(catalog, conns, catalog.stranger, catalog.stranger_token)
    assert reply.header.status == 0  # a valid app: it may connect
    for request in (
        AddProducerRequest(topics=(catalog.topic,), app=catalog.stranger),
        AddConsumerRequest(topics=(catalog.topic,), app=catalog.stranger),
    ):
        denied = await raw.call(request)
        assert denied.header.type == CommandType.BOOLEAN_ACK
        assert denied.header.status == Code.CN_NO_PERMISSION
    code = await produced_code(raw, produce(catalog.topic, catalog.stranger, b"intruder"))
    assert code in (Code.FW_PUT_MESSAGE_TOPIC_NOT_WRITE, Code.CN_NO_PERMISSION)
    code, messages = await fetched(raw, fetch_topic(catalog.topic, catalog.stranger))
    assert messages == () and code != 0
    code, messages = await fetched(raw, fetch_partition(catalog.topic, catalog.stranger))
    assert messages == ()
    assert code in (Code.FW_GET_MESSAGE_TOPIC_NOT_READ, Code.CN_NO_PERMISSION)
    prepared = await raw.call(prepare(catalog.topic, catalog.stranger))
    assert prepared.header.status == Code.FW_PRODUCER_NOT_EXISTS  # no ADD_PRODUCER: §6.1
    acked = await raw.call(ack(catalog.topic, catalog.stranger, (BrokerMessage(partition=0),)))
    assert all(p.code != 0 for t in acked.payload.topics for p in t.partitions), acked.payload
    # nor may it act as the owner app on its own connection
    foreign = await raw.call(produce(catalog.topic, catalog.owner, b"as the owner"))
    assert foreign.header.status == Code.FW_CONNECTION_NOT_EXISTS
    foreign = await raw.call(fetch_topic(catalog.topic, catalog.owner))
    assert foreign.header.status == Code.FW_CONNECTION_NOT_EXISTS
    foreign = await raw.call(ack(catalog.topic, catalog.owner, (BrokerMessage(partition=0),)))
    assert foreign.header.status == Code.FW_CONNECTION_NOT_EXISTS

    after = await store.state(catalog.topic), await store.progress(catalog.topic, catalog.owner)
    assert after == before
    assert await store.progress(catalog.topic, catalog.stranger) == ((-1, "", 0),)
    assert await store.engine.open_transactions(catalog.topic, catalog.stranger) == []
    await owner_consumes(producer, catalog, b"seed")


# ---------------------------------------------------------------------- 4: the owner


async def test_owner_produces_and_consumes_its_message_back(
    catalog: Catalog, broker, conns, store: Store
):
    raw = await owner(catalog, conns)
    body = bytes(range(256)) + "ünïcødé".encode()
    assert await produced_code(raw, produce(catalog.topic, catalog.owner, body)) == 0
    assert (await store.state(catalog.topic)).log_count == 1
    await owner_consumes(raw, catalog, body)
    assert await store.progress(catalog.topic, catalog.owner) == ((1, "", 0),)


async def test_a_rotated_token_closes_the_connections_that_logged_in_with_it(
    catalog: Catalog, broker, conns, store: Store, seen: Seen
):
    """Rotating the app's token in the console ends the connections established with the
    old one (they acted for the app until they closed); a login with it gets status 2,
    with the new one 0 (brokers.engine.credentials)."""
    raw = await owner(catalog, conns)
    old_token = catalog.owner_token
    await rotate_owner_token(catalog, seen)
    assert await raw.closed()
    _, reply = await connect(catalog, conns, catalog.owner, old_token)
    assert reply.header.status == Code.CN_AUTHENTICATION_ERROR
    fresh = await owner(catalog, conns)
    assert await produced_code(fresh, produce(catalog.topic, catalog.owner, b"new")) == 0
    assert await store.bodies(catalog.topic) == [b"new"]


# ---------------------------------------------------------------------- 5: paused


async def test_paused_consumer_gets_186_until_resumed(
    catalog: Catalog, broker, conns, store: Store, seen: Seen
):
    raw = await owner(catalog, conns)
    await change(catalog, seen, consumer={"paused": True})
    assert await produced_code(raw, produce(catalog.topic, catalog.owner, b"while paused")) == 0
    before = await store.state(catalog.topic), await store.progress(catalog.topic, catalog.owner)
    assert before[0].log_count == 1

    code, messages = await fetched(raw, fetch_topic(catalog.topic, catalog.owner))
    assert (code, messages) == (Code.FW_FETCH_TOPIC_MESSAGE_PAUSED, ())
    code, messages = await fetched(raw, fetch_partition(catalog.topic, catalog.owner))
    assert (code, messages) == (Code.FW_FETCH_TOPIC_MESSAGE_PAUSED, ())
    after = await store.state(catalog.topic), await store.progress(catalog.topic, catalog.owner)
    assert after == before  # nothing locked, nothing acked

    await change(catalog, seen, consumer={"paused": False})
    await owner_consumes(raw, catalog, b"while paused")


# ---------------------------------------------------------------------- 6: blacklisted address


async def test_blacklisted_client_may_neither_produce_nor_consume(
    catalog: Catalog, broker, conns, store: Store, seen: Seen
):
    raw = await owner(catalog, conns)
    assert await produced_code(raw, produce(catalog.topic, catalog.owner, b"seed")) == 0
    await change(
        catalog,
        seen,
        producer={"blacklist": [LOOPBACK_HOST]},
        consumer={"blacklist": [LOOPBACK_NET]},
    )
    before = await store.state(catalog.topic), await store.progress(catalog.topic, catalog.owner)

    code = await produced_code(raw, produce(catalog.topic, catalog.owner, b"from the blacklist"))
    assert code == Code.FW_PUT_MESSAGE_APP_CLIENT_IP_NOT_WRITE
    code, messages = await fetched(raw, fetch_topic(catalog.topic, catalog.owner))
    assert (code, messages) == (Code.FW_GET_MESSAGE_APP_CLIENT_IP_NOT_READ, ())
    code, messages = await fetched(raw, fetch_partition(catalog.topic, catalog.owner))
    assert (code, messages) == (Code.FW_GET_MESSAGE_APP_CLIENT_IP_NOT_READ, ())
    prepared = await raw.call(prepare(catalog.topic, catalog.owner))
    assert prepared.payload.code == Code.FW_PUT_MESSAGE_APP_CLIENT_IP_NOT_WRITE
    assert not prepared.payload.tx_id
    after = await store.state(catalog.topic), await store.progress(catalog.topic, catalog.owner)
    assert after == before
    assert await store.engine.open_transactions(catalog.topic, catalog.owner) == []

    await change(catalog, seen, producer={"blacklist": []}, consumer={"blacklist": []})
    await owner_consumes(raw, catalog, b"seed")  # and not the refused one


async def test_a_long_poll_parked_before_a_blacklist_ends_with_147(
    catalog: Catalog, broker, conns, store: Store, seen: Seen
):
    """The gate of now, not of the poll's start: a fetch parked on an empty topic when the
    client's address is blacklisted, then woken by an append, ends with 147 and nothing,
    as a fetch made after it does (the engine asks the gate again after each wait; a
    catalog change alone does not wake it: it ends so at its deadline)."""
    raw = await owner(catalog, conns)
    producer = await owner(catalog, conns)
    request = FetchTopicMessageRequest(
        topics=(TopicFetch(topic=catalog.topic, count=10),),
        app=catalog.owner,
        long_poll_timeout=20_000,
    )
    raw.send(frame_bytes(request, 7))
    parked = asyncio.create_task(raw.read(wait=25))
    await asyncio.sleep(0.3)
    assert not parked.done()
    await change(catalog, seen, consumer={"blacklist": [LOOPBACK_NET]})
    assert await produced_code(producer, produce(catalog.topic, catalog.owner, b"late")) == 0
    (entry,) = (await asyncio.wait_for(parked, 10)).payload.topics  # not its 20 s
    assert (entry.code, tuple(entry.messages)) == (Code.FW_GET_MESSAGE_APP_CLIENT_IP_NOT_READ, ())
    await change(catalog, seen, consumer={"blacklist": []})
    await owner_consumes(raw, catalog, b"late")  # kept for the consumer, not lost


# ---------------------------------------------------------------------- 7: rate limit


@LIMITS
async def test_rate_limited_producer_gets_74_and_only_acknowledged_messages_are_stored(
    catalog: Catalog, broker, conns, store: Store, seen: Seen, limit: dict
):
    raw = await owner(catalog, conns)
    await change(catalog, seen, **limit)
    bodies = [f"burst-{i}".encode() for i in range(8)]
    for i, body in enumerate(bodies):  # pipelined: all sent before any reply is read
        raw.send(frame_bytes(produce(catalog.topic, catalog.owner, body), 100 + i))
    replies = {}
    for _ in bodies:
        frame = await raw.read()
        replies[frame.header.request_id] = frame
    codes = [replies[100 + i].payload.topics[0].code for i in range(len(bodies))]
    assert set(codes) <= {0, Code.CT_LIMIT_REQUEST}, codes
    assert 0 in codes and Code.CT_LIMIT_REQUEST in codes, codes
    accepted = [b for b, c in zip(bodies, codes, strict=True) if c == 0]
    assert sorted(await store.bodies(catalog.topic)) == sorted(accepted)
    code, messages = await fetched(raw, fetch_topic(catalog.topic, catalog.owner))
    assert code == 0 and sorted(m.body for m in messages) == sorted(accepted)


# ---------------------------------------------------------------------- names (§8.5)


async def test_topic_name_with_control_characters_is_status_6_not_1(
    catalog: Catalog, broker, conns, store: Store
):
    raw = await owner(catalog, conns)
    bad = "a\x00\x01\nb"
    for request in (
        AddProducerRequest(topics=(bad,), app=catalog.owner),
        AddConsumerRequest(topics=(bad,), app=catalog.owner),
    ):
        reply = await raw.call(request)
        assert reply.header.type == CommandType.BOOLEAN_ACK
        assert reply.header.status == Code.CN_PARAM_ERROR, reply.header
    assert await produced_code(raw, produce(bad, catalog.owner, b"x")) == Code.CN_PARAM_ERROR
    assert (await store.state(catalog.topic)).log_count == 0
    # the connection stays usable after the refusals
    assert await produced_code(raw, produce(catalog.topic, catalog.owner, b"ok")) == 0
