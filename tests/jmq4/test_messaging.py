"""Produce, consume, ack, retry, indexes, long poll and leader rules, with the project's
client and raw frames."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
import zlib

import pytest

from brokers.catalog_loader import publish
from brokers.clients.jmq4 import Jmq4Client, Jmq4Error, OutgoingMessage, build_message
from brokers.models import Topic
from brokers.protocols.jmq4 import (
    AckEntry,
    AckIndexTopic,
    AckPartition,
    AckTopic,
    AddConsumerRequest,
    Code,
    CommitAckIndexRequest,
    CommitAckRequest,
    FetchIndexRequest,
    FetchPartitionMessageRequest,
    FetchTopicMessageRequest,
    IndexTopic,
    PartitionFetch,
    PartitionFetchTopic,
    PartitionIndex,
    ProduceMessageRequest,
    ProduceTopic,
    RetryType,
    TopicFetch,
)
from tests.jmq4.raw import RawClient
from tests.scripts_path import free_port

pytestmark = pytest.mark.django_db


def client(catalog, broker: int = 1, app: str = "app1", token: str | None = None) -> Jmq4Client:
    return Jmq4Client(
        "127.0.0.1", catalog.ports[broker], app=app, token=token or catalog.token, timeout=5
    )


def produce_request(topic: str, partition: int, *bodies: bytes, app: str = "app1"):
    messages = tuple(
        build_message(OutgoingMessage(b), app=app, partition=partition) for b in bodies
    )
    return ProduceMessageRequest(topics=(ProduceTopic(topic=topic, messages=messages),), app=app)


async def test_bad_token_raises_status_2(catalog, brokers):
    with pytest.raises(Jmq4Error) as info:
        await client(catalog, token="nope").connect()
    assert info.value.code == Code.CN_AUTHENTICATION_ERROR


async def test_produce_fetch_ack_round_trip(catalog, brokers):
    async with client(catalog) as c:
        big = b"x" * 5000
        items = await c.produce(
            "local",
            [OutgoingMessage(b"hello", business_id="b-1", attributes={"k": "v=1"}), big],
            partition=0,
        )
        assert [(i.partition, i.index) for i in items] == [(0, 0), (0, 1)]
        got = await c.fetch("local")
        assert [(m.partition, m.index, m.body) for m in got] == [(0, 0, b"hello"), (0, 1, big)]
        assert got[0].business_id == "b-1" and got[0].attributes == {"k": "v=1"}
        assert await c.ack(got) == {0: 0}
        assert await c.fetch("local") == []


async def test_stored_bytes_are_sent_verbatim_with_broker_fields(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    request = produce_request("local", 1, b"abc")
    reply = await raw.call(request)
    assert reply.payload.topics[0].code == 0
    sent = request.topics[0].messages[0].to_bytes()
    await raw.call(AddConsumerRequest(topics=("local",), app="app1"))
    fetched = await raw.call(
        FetchTopicMessageRequest(topics=(TopicFetch(topic="local", count=5),), app="app1")
    )
    message = fetched.payload.topics[0].messages[0]
    stored = message.raw
    assert len(stored) == len(sent)
    # partition, index, clientIp, sysCode bit7 and storeTime are the broker's; the rest is ours
    assert (
        stored[61:] == sent[61:] and stored[18:20] == sent[18:20] and stored[51:59] == sent[51:59]
    )
    host, _port = message.client_address()
    assert host == "127.0.0.1" and message.partition == 1 and message.index == 0
    await raw.close()


async def test_batch_of_100_takes_100_indexes(catalog, brokers):
    async with client(catalog) as c:
        bodies = [f"m{i}".encode() * 40 for i in range(100)]
        items = await c.produce("local", bodies, partition=1, batch=True)
        assert len(items) == 1 and items[0].index == 0
        more = await c.produce("local", [b"after"], partition=1)
        assert more[0].index == 100
        got = await c.fetch("local", count=200)
        assert [m.body for m in got[:100]] == bodies and got[100].index == 100
        assert [m.index for m in got[:100]] == list(range(100))
        await c.ack(got)


async def test_produce_errors_per_topic(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    reply = await raw.call(produce_request("remote", 0, b"x"))
    assert reply.payload.topics[0].code == Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER
    assert reply.payload.topics[0].items[0].index == -1
    reply = await raw.call(produce_request("remote", -1, b"x"))
    assert reply.payload.topics[0].code == Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER
    reply = await raw.call(produce_request("nope", 0, b"x"))
    assert reply.payload.topics[0].code == Code.FW_TOPIC_NOT_EXIST
    mixed = produce_request("local", 0, b"a")
    second = build_message(OutgoingMessage(b"b"), app="app1", partition=1)
    mixed = ProduceMessageRequest(
        topics=(ProduceTopic(topic="local", messages=(*mixed.topics[0].messages, second)),),
        app="app1",
    )
    reply = await raw.call(mixed)
    assert reply.payload.topics[0].code == Code.CN_PARAM_ERROR
    empty = ProduceMessageRequest(topics=(ProduceTopic(topic="local"),), app="app1")
    failed = (await raw.call(empty)).payload.topics[0]
    assert (failed.code, failed.items) == (Code.CN_PARAM_ERROR, ())  # one item per message
    bad_size = produce_request("local", 0, b"abc")
    msg = bad_size.topics[0].messages[0]
    from dataclasses import replace

    wrong = replace(msg, size=msg.encoded_size + 5)
    reply = await raw.call(
        ProduceMessageRequest(topics=(ProduceTopic(topic="local", messages=(wrong,)),), app="app1")
    )
    assert reply.payload.topics[0].code == Code.CN_PARAM_ERROR
    # attributes every reader would fail to parse (Java Properties' malformed \uXXXX)
    malformed = replace(msg, attributes="a=\\uZZ", size=None)
    reply = await raw.call(
        ProduceMessageRequest(
            topics=(ProduceTopic(topic="local", messages=(malformed,)),), app="app1"
        )
    )
    assert reply.payload.topics[0].code == Code.CN_PARAM_ERROR
    index = await raw.call(
        FetchIndexRequest(topics=(IndexTopic(topic="local", partitions=(0,)),), app="app1")
    )
    assert index.payload.topics[0].partitions[0].right_index == 0  # nothing partial was stored
    bad_names = ("lo\x01cal", "t" * 256)  # §8.5: code 6 where a name cannot be a topic
    index = await raw.call(
        FetchIndexRequest(
            topics=tuple(IndexTopic(topic=t, partitions=(0, 1)) for t in bad_names), app="app1"
        )
    )
    assert [[(p.index, p.code) for p in t.partitions] for t in index.payload.topics] == [
        [(-1, Code.CN_PARAM_ERROR)] * 2
    ] * 2
    await raw.close()
    async with client(catalog, app="other", token=catalog.other_token) as c:
        with pytest.raises(Jmq4Error) as info:
            await c.produce("local", [b"x"], partition=0)
        assert info.value.code == Code.FW_PUT_MESSAGE_TOPIC_NOT_WRITE


async def test_fetch_rules_136_187_186_147_146(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    fetch = FetchTopicMessageRequest(topics=(TopicFetch(topic="local"),), app="app1")
    assert (await raw.call(fetch)).payload.topics[0].code == Code.FW_CONSUMER_NOT_EXISTS
    await raw.call(AddConsumerRequest(topics=("local", "remote"), app="app1"))
    remote = FetchTopicMessageRequest(topics=(TopicFetch(topic="remote"),), app="app1")
    assert (await raw.call(remote)).payload.topics[0].code == (
        Code.FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER
    )
    by_partition = await raw.call(
        FetchPartitionMessageRequest(
            topics=(
                PartitionFetchTopic(topic="orders", partitions=(PartitionFetch(partition=2),)),
            ),
            app="app1",
        )
    )
    assert by_partition.payload.topics[0].partitions[0].code == (
        Code.FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER
    )
    await raw.close()
    for app, token, code in (
        ("paused", catalog.paused_token, Code.FW_FETCH_TOPIC_MESSAGE_PAUSED),
        ("blocked", catalog.blocked_token, Code.FW_GET_MESSAGE_APP_CLIENT_IP_NOT_READ),
    ):
        raw = await RawClient.open(catalog.ports[1])
        await raw.login(app, token)
        await raw.call(AddConsumerRequest(topics=("local",), app=app))
        reply = await raw.call(
            FetchTopicMessageRequest(topics=(TopicFetch(topic="local"),), app=app)
        )
        assert reply.payload.topics[0].code == code
        await raw.close()
    async with client(catalog, app="blocked", token=catalog.blocked_token) as c:
        with pytest.raises(Jmq4Error) as info:
            await c.produce("local", [b"x"], partition=0)
        assert info.value.code == Code.FW_PUT_MESSAGE_APP_CLIENT_IP_NOT_WRITE


async def test_ack_rules_and_retry_partition(catalog, brokers):
    async with client(catalog) as c:
        await c.produce("local", [b"a", b"b", b"c"], partition=0)
        got = await c.fetch("local")
        assert len(got) == 3
        raw = await RawClient.open(catalog.ports[1])
        await raw.login("app1", catalog.token)
        gap = CommitAckRequest(
            topics=(
                AckTopic(
                    topic="local",
                    partitions=(
                        AckPartition(
                            partition=0,
                            acks=(AckEntry(partition=0, index=0), AckEntry(partition=0, index=2)),
                        ),
                    ),
                ),
            ),
            app="app1",
        )
        reply = await raw.call(gap)
        assert reply.payload.topics[0].partitions[0].code == Code.FW_CONSUMER_ACK_FAIL
        await raw.close()
        assert await c.ack(got[:1], RetryType.EXCEPTION) == {0: 0}
        assert await c.ack(got[1:]) == {0: 0}
        retried = []
        deadline = time.monotonic() + 5
        while not retried and time.monotonic() < deadline:
            retried = await c.fetch("local", long_poll_ms=1500)
        assert [(m.partition, m.body) for m in retried] == [(32767, b"a")]
        assert await c.ack(retried) == {32767: 0}


async def test_an_ack_not_at_the_ack_index_frees_the_partition(catalog, brokers):
    """jmq4.md §6.4: an ack that does not start at the ack index is code 0 and releases
    the lock; the next fetch reads from the ack index at once (§6.2) — here only what was
    not acked — and acking that moves the ack index past the rest."""
    async with client(catalog) as c:
        await c.produce("local", [b"a", b"b", b"c", b"d"], partition=0)
        got = await c.fetch("local", count=3)
        assert [m.body for m in got] == [b"a", b"b", b"c"]
        assert await c.ack(got[1:]) == {0: 0}
        again = await c.fetch("local", count=10)
        assert [(m.index, m.body) for m in again] == [(got[0].index, b"a")]
        assert await c.ack(again) == {0: 0}
        rest = await c.fetch("local", count=10)
        assert [m.body for m in rest] == [b"d"]
        assert await c.ack(rest) == {0: 0}


async def fetch_partition_zero(catalog, *, count: int):
    """A FETCH_PARTITION_MESSAGE of ``local`` partition 0 from index 0 (its one entry)."""
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    reply = await raw.call(
        FetchPartitionMessageRequest(
            topics=(
                PartitionFetchTopic(
                    topic="local", partitions=(PartitionFetch(partition=0, index=0, count=count),)
                ),
            ),
            app="app1",
        )
    )
    await raw.close()
    [part] = reply.payload.topics[0].partitions
    return part


async def test_a_fetch_response_stays_under_the_frame_maximum(catalog, brokers):
    """jmq4.md §9: a frame above the receiver's maximum closes its connection. Ten large
    messages (stored by any protocol, up to the engine's body limit) would not fit one
    response: a fetch takes what fits, the client's ack of it frees the partition and
    the next fetch goes on from there; a partition fetch the same."""
    for b in brokers.values():
        ctx = b.server.ctx
        ctx.config = dataclasses.replace(ctx.config, max_frame_size=200 * 1024)
    body = random.Random(7).randbytes(50_000)  # incompressible; 64 KiB of 200 kept for the rest
    start = next(iter(brokers.values())).server.ctx.engine.now_ms()
    async with client(catalog) as c:
        for i in range(5):
            await c.produce("local", [body + bytes([i])], partition=0)
        rounds = []
        while True:
            got = await c.fetch("local", count=10)
            if not got:
                break
            rounds.append([m.body[-1] for m in got])
            assert await c.ack(got) == {0: 0}
        assert rounds == [[0, 1], [2, 3], [4]]
        # the engine read what each response had room for: nothing counted twice
        for b in brokers.values():
            await b.server.ctx.engine.counters.flush()
        engine = next(iter(brokers.values())).server.ctx.engine
        rows = await engine.counters.traffic("app", "app1", start, engine.now_ms() + 1)
        assert sum(r.consumed for r in rows) == 5
        stored = await engine.read("local", 0, 0, 10)
        assert sum(r.consumed_bytes for r in rows) == sum(len(d.record) for d in stored)
        part = await fetch_partition_zero(catalog, count=10)
        assert part.code == 0 and len(part.messages) == 2


async def test_a_topic_with_no_room_left_in_the_response_is_not_counted_consumed(catalog, brokers):
    """A FETCH_TOPIC_MESSAGE of two topics whose first fills the response: the engine
    reads the second topic's first message (at least one) but the response has no room
    for it, so the server gives the partition back — and the message is not counted as
    consumed traffic, nor charged to the rate limit, until a fetch sends it."""
    for b in brokers.values():
        ctx = b.server.ctx
        ctx.config = dataclasses.replace(ctx.config, max_frame_size=200 * 1024)
    body = random.Random(8).randbytes(120_000)  # incompressible: one fits a response
    engine = brokers[1].server.ctx.engine
    start = engine.now_ms()
    async with client(catalog) as c:
        await c.produce("local", [body + b"L"], partition=0)
        await c.produce("orders", [body + b"O"], partition=0)
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    await raw.call(AddConsumerRequest(topics=("local", "orders"), app="app1"))
    both = FetchTopicMessageRequest(
        topics=(TopicFetch(topic="local", count=10), TopicFetch(topic="orders", count=10)),
        app="app1",
    )
    first = (await raw.call(both)).payload.topics
    assert [len(t.messages) for t in first] == [1, 0] and first[1].code == 0
    orders = FetchTopicMessageRequest(topics=(TopicFetch(topic="orders", count=10),), app="app1")
    [again] = (await raw.call(orders)).payload.topics
    assert [zlib.decompress(m.body)[-1:] for m in again.messages] == [b"O"]  # at once
    await raw.close()
    for b in brokers.values():
        await b.server.ctx.engine.counters.flush()
    rows = await engine.counters.traffic("app", "app1", start, engine.now_ms() + 1)
    assert sum(r.consumed for r in rows) == 2  # each message once


async def test_a_message_larger_than_any_frame_is_failed_not_sent(catalog, brokers):
    """A message whose record alone is over the frame maximum (a zbus body of up to
    16 MiB against JMQ4's 16 MiB frame; here a 150 KB one against 200 KiB) can never be
    sent over JMQ4: the fetch fails it into the group's retries instead of writing a frame
    the client would drop, keeps the connection, and goes on past it; a partition fetch
    at it answers code 6."""
    for b in brokers.values():
        ctx = b.server.ctx
        ctx.config = dataclasses.replace(ctx.config, max_frame_size=200 * 1024)
    big = random.Random(9).randbytes(150_000)
    engine = next(iter(brokers.values())).server.ctx.engine
    async with client(catalog) as c:
        await c.produce("local", [big], partition=0)
        await c.produce("local", [b"after-1", b"after-2"], partition=0)
        assert await c.fetch("local", count=10) == []  # the big one failed, nothing sent
        got = await c.fetch("local", count=10)
        assert [m.body for m in got] == [b"after-1", b"after-2"]
        assert await c.ack(got) == {0: 0}
        [retry] = await engine.retries("local", "app1")
        assert retry.index == 0  # its body as stored: the client compressed it (zlib)
        assert zlib.decompress(retry.message.body) == big
        assert "frame maximum" in retry.reason
        # due again after its backoff: fetched from the retries, failed again there
        deadline = time.monotonic() + 10
        while (await engine.retries("local", "app1"))[0].attempts < 2:
            assert time.monotonic() < deadline, await engine.retries("local", "app1")
            assert await c.fetch("local", count=10) == []
            await asyncio.sleep(0.2)
        part = await fetch_partition_zero(catalog, count=5)
        assert (part.code, part.messages) == (6, ())


async def test_partition_fetch_index_and_commit_ack_index(catalog, brokers):
    async with client(catalog) as c:
        await c.produce("local", [b"0", b"1", b"2", b"3"], partition=0)
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)

    def read(index: int, count: int = 10):
        return FetchPartitionMessageRequest(
            topics=(
                PartitionFetchTopic(
                    topic="local",
                    partitions=(PartitionFetch(partition=0, count=count, index=index),),
                ),
            ),
            app="app1",
        )

    part = (await raw.call(read(-1))).payload.topics[0].partitions[0]
    assert part.code == 0 and [m.index for m in part.messages] == [0, 1, 2, 3]
    part = (await raw.call(read(2, 1))).payload.topics[0].partitions[0]
    assert [m.body for m in part.messages] == [b"2"]
    part = (await raw.call(read(4))).payload.topics[0].partitions[0]
    assert part.code == 0 and part.messages == ()
    part = (await raw.call(read(9))).payload.topics[0].partitions[0]
    assert part.code == Code.FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE

    async def ack_index(index: int):
        return await raw.call(
            CommitAckIndexRequest(
                topics=(
                    AckIndexTopic(
                        topic="local", partitions=(PartitionIndex(partition=0, index=index),)
                    ),
                ),
                app="app1",
            )
        )

    async def indexes():
        reply = await raw.call(
            FetchIndexRequest(topics=(IndexTopic(topic="local", partitions=(0,)),), app="app1")
        )
        p = reply.payload.topics[0].partitions[0]
        return p.index, p.left_index, p.right_index

    assert (await ack_index(-1)).payload.topics == ()
    assert await indexes() == (4, 0, 4)
    await ack_index(-2)
    assert await indexes() == (0, 0, 4)
    await ack_index(3)
    assert await indexes() == (3, 0, 4)
    await ack_index(3)  # where it is: no move
    # the client's own commits moved the committed offset (4 → 0 → 3): offset moves, as
    # an HTTP-MQ forceAck's are (the console's offset-move alert)
    engine = brokers[1].engine
    assert (await engine.offset_moves([("local", "app1")])) == {("local", "app1"): 2}
    bad = await raw.call(
        CommitAckIndexRequest(
            topics=(
                AckIndexTopic(topic="local", partitions=(PartitionIndex(partition=7, index=0),)),
            ),
            app="app1",
        )
    )
    assert bad.payload.topics[0].partitions[0].code == Code.CN_PARAM_ERROR
    await raw.close()


async def test_long_poll_is_woken_by_a_produce(catalog, brokers):
    async with client(catalog) as consumer, client(catalog) as producer:
        await consumer.fetch("local")  # registers the consumer
        started = time.monotonic()
        task = asyncio.create_task(consumer.fetch("local", long_poll_ms=5000))
        await asyncio.sleep(0.3)
        await producer.produce("local", [b"wake"], partition=1)
        got = await task
        assert [m.body for m in got] == [b"wake"]
        assert time.monotonic() - started < 2.0
        empty_started = time.monotonic()
        assert await consumer.fetch("local", long_poll_ms=400) == []
        assert 0.35 < time.monotonic() - empty_started < 2.0


async def test_long_polls_beyond_the_led_partitions_are_answered_at_once(catalog, brokers):
    """jmq4.md §6.2: at most as many parked fetches per (topic, app) as the broker leads
    partitions of the topic (``local``: 2); beyond, the empty result comes at once."""
    async with (
        client(catalog) as a,
        client(catalog) as b,
        client(catalog) as c,
        client(catalog) as producer,
    ):
        for consumer in (a, b, c):
            await consumer.fetch("local")  # registers the consumer
        waiting = [asyncio.create_task(x.fetch("local", long_poll_ms=5000)) for x in (a, b)]
        await asyncio.sleep(0.3)
        assert brokers[1].server.ctx.long_polls.waiting("local", "app1") == 2
        started = time.monotonic()
        assert await c.fetch("local", long_poll_ms=5000) == []
        assert time.monotonic() - started < 1.0
        assert not any(task.done() for task in waiting)
        await producer.produce("local", [b"one"], partition=0)
        await producer.produce("local", [b"two"], partition=1)
        got = await asyncio.wait_for(asyncio.gather(*waiting), 5)
        assert sorted(m.body for batch in got for m in batch) == [b"one", b"two"]
        assert brokers[1].server.ctx.long_polls.waiting("local", "app1") == 0
        # the slots are free again: a long poll waits its time once more
        started = time.monotonic()
        assert await c.fetch("local", long_poll_ms=400) == []
        assert time.monotonic() - started > 0.35


async def test_client_follows_leaders_across_brokers(catalog, brokers):
    async with client(catalog) as c:
        for partition in range(4):
            items = await c.produce("orders", [f"p{partition}".encode()], partition=partition)
            assert items[0].partition == partition
        seen = []
        for _ in range(6):
            batch = await c.fetch("orders")
            seen += [m.body for m in batch]
            await c.ack(batch)
        assert sorted(seen) == [b"p0", b"p1", b"p2", b"p3"]
        remote = await c.produce("remote", [b"r"])
        assert remote[0].index == 0


async def test_transactions(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    from brokers.protocols.jmq4 import (
        CommitRequest,
        FetchProduceFeedbackRequest,
        PrepareRequest,
        RollbackRequest,
    )

    denied = await raw.call(PrepareRequest(topic="local", app="app1"))
    assert denied.header.status == Code.FW_PRODUCER_NOT_EXISTS
    unknown = await raw.call(RollbackRequest(topic="local", app="app1", tx_id="nope"))
    assert unknown.payload.code == Code.CN_TRANSACTION_NOT_EXISTS
    unknown = await raw.call(CommitRequest(topic="local", app="app1", tx_id="nope"))
    assert unknown.payload.code == Code.CN_TRANSACTION_NOT_EXISTS
    bad_tx = ProduceMessageRequest(
        topics=(
            ProduceTopic(
                topic="local",
                tx_id="nope",
                messages=(build_message(OutgoingMessage(b"x"), app="app1", partition=0),),
            ),
        ),
        app="app1",
    )
    assert (await raw.call(bad_tx)).payload.topics[0].code == Code.CN_TRANSACTION_NOT_EXISTS
    feedback = await raw.call(FetchProduceFeedbackRequest(app="app1", topic="local"))
    assert feedback.payload.entries == () and feedback.payload.code == 0
    await raw.close()
    async with client(catalog) as c:
        tx = await c.transaction("local", transaction_id="q-1")
        await tx.produce([b"t1", b"t2"])
        assert await c.fetch("local") == []
        await tx.commit()
        got = await c.fetch("local")
        assert [m.body for m in got] == [b"t1", b"t2"]
        await c.ack(got)
        tx = await c.transaction("local")
        await tx.produce([b"gone"])
        await tx.rollback()
        with pytest.raises(Jmq4Error) as info:
            await tx.commit()
        assert info.value.code == Code.CN_TRANSACTION_NOT_EXISTS
        assert await c.fetch("local") == []


async def test_produce_feedback_long_polls_until_a_transaction_is_overdue(catalog, brokers):
    from brokers.protocols.jmq4 import FetchProduceFeedbackRequest

    async with client(catalog) as c:
        tx = await c.transaction("local", transaction_id="q-late", timeout_ms=800)
        await tx.produce([b"pending"])
        raw = await RawClient.open(catalog.ports[1])
        await raw.login("app1", catalog.token)
        loop = asyncio.get_running_loop()
        started = loop.time()
        quick = await raw.call(FetchProduceFeedbackRequest(app="app1", topic="local"))
        assert quick.payload.entries == ()  # not overdue yet, and no long poll asked for
        waited = await raw.call(
            FetchProduceFeedbackRequest(app="app1", topic="local", long_poll_timeout=10_000)
        )
        assert [(e.tx_id, e.transaction_id) for e in waited.payload.entries] == [
            (tx.tx_id, "q-late")
        ]
        assert loop.time() - started < 9  # answered when it came due, not at the poll's end
        again = await raw.call(
            FetchProduceFeedbackRequest(app="app1", topic="local", long_poll_timeout=300)
        )
        assert again.payload.entries == ()  # offered once per 60 s
        await raw.close()
        await tx.rollback()


async def test_consume_loop_retries_failed_messages(catalog, brokers):
    async with client(catalog) as c:
        await c.produce("local", [b"ok", b"boom"], partition=0)
        await c.produce("local", [b"ok2"], partition=0)
        stop = asyncio.Event()
        handled: list[bytes] = []
        failures = 0

        async def handler(message):
            nonlocal failures
            if message.body == b"boom" and failures == 0:
                failures += 1
                raise RuntimeError("first attempt fails")
            handled.append(message.body)
            if {b"ok", b"ok2", b"boom"} <= set(handled):
                stop.set()

        await asyncio.wait_for(c.consume("local", handler, stop=stop, long_poll_ms=300), 10)
        assert failures == 1 and sorted(handled) == [b"boom", b"ok", b"ok2"]
        assert (await c.fetch_index("local", [0]))[0] == (3, 0, 3)


async def _cli(catalog, *args: str) -> str:
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "brokers.clients.jmq4",
        "--port",
        str(catalog.ports[1]),
        "--app",
        "app1",
        "--token",
        catalog.token,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out
    return out.decode()


async def test_cli_cluster_produce_consume(catalog, brokers):
    assert "group 1 leader 2" in await _cli(catalog, "cluster", "orders")
    assert "partition=0 index=0" in await _cli(
        catalog, "produce", "local", "hi", "--partition", "0"
    )
    assert "0:0 hi" in await _cli(catalog, "consume", "local", "--max", "1")


async def test_a_client_asks_the_cluster_again_after_its_leader_went_unreachable(catalog, brokers):
    """A cached cluster view naming a leader that no longer answers (it failed over) is
    dropped with the failed request: the next call reads the view again."""
    async with client(catalog) as c:
        await c.produce("local", [b"after failover"], partition=0)
        meta = await c.metadata("local")
        gone = {
            bid: dataclasses.replace(b, port=free_port()) for bid, b in meta.brokers.items()
        }  # nothing listens there: what a client sees of a leader killed meanwhile
        c._metadata["local"] = dataclasses.replace(meta, brokers=gone)
        with pytest.raises(OSError):
            await c.fetch("local")
        got = await c.fetch("local")
        assert [m.body for m in got] == [b"after failover"]
        with pytest.raises(OSError):  # the same for produce
            c._metadata["local"] = dataclasses.replace(meta, brokers=gone)
            await c.produce("local", [b"x"], partition=0)
        assert [i.index for i in await c.produce("local", [b"y"], partition=0)] == [1]
        with pytest.raises(OSError):  # and for opening a transaction
            c._metadata["local"] = dataclasses.replace(meta, brokers=gone)
            await c.transaction("local")
        tx = await c.transaction("local")
        await tx.rollback()


@pytest.fixture
def send_back_catalog(catalog):
    """The catalog with ``local`` sending back at most 2 failed messages a second (before
    the brokers start, so they load it)."""
    Topic.objects.filter(code="local").update(send_back_limit=2)
    publish()
    return catalog


async def test_a_retry_ack_past_the_send_back_limit_is_delivered_again(send_back_catalog, brokers):
    async with client(send_back_catalog) as c:
        await c.produce("local", [b"a", b"b", b"c", b"d", b"e"], partition=0)
        first = await c.fetch("local", count=2)
        assert await c.ack(first, RetryType.EXCEPTION) == {0: 0}  # 2 copied for a retry
        rest = await c.fetch("local", count=3)
        assert [m.body for m in rest] == [b"c", b"d", b"e"]
        assert await c.ack(rest, RetryType.EXCEPTION) == {0: 0}  # past the limit
        again = await c.fetch("local", count=3)  # not copied: the same run again
        assert [(m.partition, m.body) for m in again] == [(0, b"c"), (0, b"d"), (0, b"e")]
        assert await c.ack(again) == {0: 0}
        retried = []
        deadline = time.monotonic() + 5
        while len(retried) < 2 and time.monotonic() < deadline:
            retried += await c.fetch("local", long_poll_ms=1500)
        assert sorted((m.partition, m.body) for m in retried) == [(32767, b"a"), (32767, b"b")]
