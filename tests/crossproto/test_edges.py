"""Cross-protocol edge cases the matrix leaves out, each on a topic of its own
(``x.edge.<case>``), with the same views and counts as :mod:`.test_matrix`:

* a JMQ4 **batch** message (sysCode bit 12, n items in n indexes) consumed over zbus,
  VibeMQ and HTTP-MQ: each item is a message of its own — its body, its businessId and
  attributes as its properties — and once every item is acked the counts are 0;
* a JMQ4 body **compressed** by the client (zlib, sysCode bits 0 and 4–6: what the Java
  client does to every body over 100 bytes) reaches the other protocols as the bytes the
  producer compressed; a JMQ4 consumer is the only one that inflates for itself;
* a VibeMQ **empty string** payload comes back as an empty string, a null one as none;
* a JMQ4 attribute value zbus cannot carry as a header (a line break) does not block the
  MQ: both messages reach the zbus consumer and settle;
* two JMQ4 messages with the **same businessId** (the VibeMQ id of both) are each settled
  by one VibeMQ ack;
* **max size** (2, BlockPublisher) is one number whatever protocol produced or consumed —
  issue 17's own reproduction: filled over HTTP-MQ, every protocol's producer is refused;
  once an HTTP-MQ consumer acked both, VibeMQ and zbus may produce again and a VibeMQ
  subscriber gets only their messages, not the acked ones again;
* messages a **push consumer gave back** (a zbus session or VibeMQ subscriber that got them
  and closed without settling) reach a JMQ4 or HTTP-MQ consumer of the same group: one
  group, whatever protocol its members speak;
* and the other way round, the group's **retries** (a message copied into its retry store,
  as a JMQ4 consumer's retry or an operator's resend of dead letters does) reach its zbus
  and VibeMQ consumers, and leave the store once they ack;
* messages produced over zbus or VibeMQ (which name no partition) **take turns** over a
  topic's 4 partitions: 4 rounds of a producer's messages leave each partition as many;
* **retention** that overtakes a consumer is counted against it whatever protocol it
  consumes by: the messages trimmed that it had neither acked nor in hand (not the one it
  read, and also one a closing session read ahead and handed back), and
  it goes on from the first message kept;
* an MQ whose **zbus name** cannot be a topic code (``订单:…``): produced over zbus by that
  name, it is consumed over every other protocol by the topic's code, and produced over
  JMQ4 by the code, it is consumed over zbus by the name;
* **properties past JMQ4's attributes field** (32,767 bytes): a zbus header of 40 KiB (its
  header block may be 64 KiB) and ten VibeMQ headers of 4,096 characters (it allows 50)
  reach every other protocol whole; a JMQ4 consumer, bound by that field, gets the
  message and the properties that fit.
"""

from __future__ import annotations

import zlib

import pytest

from brokers.clients.jmq4 import OutgoingMessage, build_batch, build_message
from brokers.protocols.jmq4 import (
    AddProducerRequest,
    BrokerMessage,
    ProduceMessageRequest,
    ProduceTopic,
)
from tests.access.conftest import until
from tests.crossproto.conftest import PROTOCOLS, ZBUS_NAMES, World
from tests.crossproto.wire import (
    BINARY,
    CONSUME,
    NO_PAYLOAD,
    PRODUCE,
    VIEW,
    Conns,
    Counts,
    Sent,
    bearer,
    compare,
    consume_httpmq,
    consume_vibemq,
    consume_zbus,
    diff,
    jmq4_session,
    produce_zbus,
    settled_everywhere,
    stored_form,
    vibemq_session,
    zbus_consume_frame,
)
from tests.crossproto.wire import (
    produce_jmq4 as produce_jmq4_wire,
)
from tests.zbus.conftest import Raw as ZbusRaw
from tests.zbus.conftest import msg

pytestmark = [pytest.mark.asyncio(loop_scope="package"), pytest.mark.django_db]

OTHERS = ("zbus", "vibemq-tcp", "vibemq-ws", "httpmq")
"""The consumer protocols other than JMQ4."""


async def produce_jmq4(world: World, topic: str, conns: Conns, *messages: BrokerMessage) -> None:
    raw = await jmq4_session(world, conns, AddProducerRequest(topics=(topic,), app=world.owner))
    reply = await raw.call(
        ProduceMessageRequest(
            topics=(ProduceTopic(topic=topic, messages=messages),), app=world.owner
        )
    )
    (entry,) = reply.payload.topics
    assert entry.code == 0, entry


def message(body: bytes, business_id: str = "", **attributes: str) -> BrokerMessage:
    return build_message(
        OutgoingMessage(body, business_id=business_id, attributes=attributes),
        app="xowner",
        partition=0,
        compress=False,
    )


async def waiting(counts: Counts, n: int) -> list[str]:
    before = await counts.settle_at(waiting=n, stored=n)
    return ["counts after producing (expected all waiting):\n  " + "\n  ".join(before)] * bool(
        before
    )


@pytest.mark.parametrize("consumer", OTHERS)
async def test_jmq4_batch_reaches_other_protocols_item_by_item(
    consumer: str, world: World, conns: Conns
):
    topic = f"x.edge.batch.{consumer}"
    items = (
        OutgoingMessage(BINARY, business_id="b1", attributes={"k": "1"}),
        OutgoingMessage("item ✓ 2".encode(), business_id="b2", attributes={"k": "2"}),
    )
    batch = build_batch(items, app=world.owner, partition=0, compress=False)
    await produce_jmq4(world, topic, conns, batch)
    sent = [
        Sent(f"batch item {i}", it.body, dict(it.attributes), it.business_id)
        for i, it in enumerate(items)
    ]
    counts = Counts(world, topic, conns)
    problems = await waiting(counts, 2)

    got, nothing_more = await CONSUME[consumer](world, topic, 2, conns)
    problems += compare(consumer, "jmq4 batch", sent, got, topic)
    problems += await settled_everywhere(world, topic, consumer, nothing_more, counts, 2)
    assert not problems, f"JMQ4 batch -> {consumer} on {topic}:\n" + "\n".join(problems)


@pytest.mark.parametrize("consumer", OTHERS)
async def test_jmq4_compressed_body_reaches_other_protocols_as_produced(
    consumer: str, world: World, conns: Conns
):
    topic = f"x.edge.compressed.{consumer}"
    body = ("compressible ✓ text " * 20).encode()
    compressed = build_message(
        OutgoingMessage(body, business_id="zz", attributes={"a": "1"}),
        app=world.owner,
        partition=0,
        compress=True,
    )
    assert zlib.decompress(compressed.body) == body  # what the Java client sends over 100 B
    await produce_jmq4(world, topic, conns, compressed)
    counts = Counts(world, topic, conns)
    problems = await waiting(counts, 1)

    got, nothing_more = await CONSUME[consumer](world, topic, 1, conns)
    problems += compare(consumer, "jmq4", [Sent("zlib", body, {"a": "1"}, "zz")], got, topic)
    problems += await settled_everywhere(world, topic, consumer, nothing_more, counts, 1)
    assert not problems, f"compressed JMQ4 -> {consumer} on {topic}:\n" + "\n".join(problems)


async def test_vibemq_empty_string_payload_stays_a_string(world: World, conns: Conns):
    topic = "x.edge.empty-payload"
    producer = await vibemq_session(world, "tcp", conns)
    for msg_id, payload in (("e1", ""), ("e2", None)):
        frame = {"id": msg_id, "type": "publish", "queue": topic, "payload": payload}
        ack = await producer.call(frame)
        assert (ack["type"], ack["id"]) == ("publishAck", msg_id), ack
    counts = Counts(world, topic, conns)
    problems = await waiting(counts, 2)

    got, nothing_more = await consume_vibemq(world, "ws", topic, 2, conns)
    received = [(g["id"], g["payload"]) for g in got]
    if received != [("e1", ""), ("e2", NO_PAYLOAD)]:
        problems.append(
            f"VibeMQ published payloads '' and null, a WebSocket subscriber got {received}"
        )
    problems += await settled_everywhere(world, topic, "vibemq-ws", nothing_more, counts, 2)
    assert not problems, "\n".join(problems)


async def test_jmq4_attribute_zbus_cannot_write_does_not_block_the_mq(world: World, conns: Conns):
    topic = "x.edge.newline"
    await produce_jmq4(
        world,
        topic,
        conns,
        message(b"first", "n1", multi="line 1\nline 2", plain="p"),
        message(b"second", "n2", plain="q"),
    )
    counts = Counts(world, topic, conns)
    problems = await waiting(counts, 2)

    got, nothing_more = await consume_zbus(world, topic, 2, conns)
    # the multi-line value has no zbus form: whether it is dropped or escaped is not
    # prescribed, but the message itself and everything behind it must come through
    first = {k: v for k, v in (got[0]["headers"] if got else {}).items() if k != "multi"}
    want = [
        {
            "status": 200,
            "body": b"first",
            "headers": {"plain": "p", "msgid": "c1", "msgid_raw": "n1"},
        },
        {
            "status": 200,
            "body": b"second",
            "headers": {"plain": "q", "msgid": "c1", "msgid_raw": "n2"},
        },
    ]
    have = [{**g, "headers": first if i == 0 else g["headers"]} for i, g in enumerate(got)]
    if have != want:
        problems.append(
            diff(
                "zbus received (message: view)",
                {str(i): w for i, w in enumerate(want)},
                {str(i): h for i, h in enumerate(have)},
            )
        )
    problems += await settled_everywhere(world, topic, "zbus", nothing_more, counts, 2)
    assert not problems, "\n".join(problems)


async def test_same_business_id_twice_is_settled_by_one_vibemq_ack_each(world: World, conns: Conns):
    topic = "x.edge.same-ids"
    await produce_jmq4(world, topic, conns, message(b"one", "same"), message(b"two", "same"))
    sent = [Sent("one", b"one", {}, "same"), Sent("two", b"two", {}, "same")]
    problems = await stored_form(world, topic, "jmq4", sent)
    counts = Counts(world, topic, conns)
    problems += await waiting(counts, 2)

    got, nothing_more = await consume_vibemq(world, "tcp", topic, 2, conns)
    problems += compare("vibemq-tcp", "jmq4", sent, got, topic)
    problems += await settled_everywhere(world, topic, "vibemq-tcp", nothing_more, counts, 2)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("pull", ["jmq4", "httpmq"])
@pytest.mark.parametrize("push", ["zbus", "vibemq-tcp"])
async def test_messages_a_push_consumer_gave_back_reach_a_pull_consumer_of_the_group(
    push: str, pull: str, world: World, conns: Conns
):
    topic = f"x.edge.handover.{push}.{pull}"
    await produce_jmq4(world, topic, conns, message(b"h1", "a", k="1"), message(b"h2", "b"))
    sent = [Sent("h1", b"h1", {"k": "1"}, "a"), Sent("h2", b"h2", {}, "b")]

    # the push consumer is handed both and goes away without settling them
    if push == "zbus":
        raw = await ZbusRaw.open(world.zbus_port)
        await raw.send(zbus_consume_frame(topic, "c1", 2, world.token))
        taken = [(await raw.recv()).body for _ in range(2)]
        await raw.close()
    else:
        conn = await vibemq_session(world, "tcp", [])
        await conn.send({"id": "sub", "type": "subscribe", "queue": topic})
        frames = [await conn.recv() for _ in range(3)]
        taken = [f["payload"].encode() for f in frames if f["type"] == "deliver"]
        await conn.close()
    assert taken == [b"h1", b"h2"]
    counts = Counts(world, topic, conns)
    problems = await waiting(counts, 2)  # given back: waiting again, none in flight

    got, nothing_more = await CONSUME[pull](world, topic, 2, conns)
    problems += compare(pull, f"jmq4 (given back by {push})", sent, got, topic)
    problems += await settled_everywhere(world, topic, pull, nothing_more, counts, 2)
    assert not problems, f"{push} gave back, {pull} consumes, on {topic}:\n" + "\n".join(problems)


async def test_max_size_is_one_number_whatever_protocol_produced_or_consumed(
    world: World, conns: Conns
):
    topic = "x.edge.max-size"  # max_queue_size 2, BlockPublisher
    producer = world.consumer_name(topic)
    for text in ("m1", "m2"):
        r = await world.mq.post(
            "/mq/produce", data={"producer": producer, "message": text}, headers=bearer(world.token)
        )
        assert r.status_code == 200, r.text
    counts = Counts(world, topic, conns)
    problems = await waiting(counts, 2)

    # full: every protocol's producer is refused and nothing is stored
    vibemq = await vibemq_session(world, "tcp", conns)
    reply = await vibemq.call({"id": "p3", "type": "publish", "queue": topic, "payload": "p3"})
    refused = {"vibemq": (reply.get("type"), reply.get("errorCode"))}
    zbus = await ZbusRaw.open(world.zbus_port)
    conns.append(zbus)
    token = f"token: {world.token}"
    await zbus.send(msg("cmd: produce", f"mq: {topic}", "msgid: z3", token, body=b"z3"))
    answer = await zbus.recv()
    refused["zbus"] = (answer.status, b"is full" in answer.body)
    await produce_jmq4_code(world, topic, conns, refused)
    r = await world.mq.post(
        "/mq/produce", data={"producer": producer, "message": "h3"}, headers=bearer(world.token)
    )
    refused["httpmq"] = (r.status_code, r.json().get("error"), r.headers.get("retry-after"))
    want = {
        "vibemq": ("error", "QUEUE_FULL"),
        "zbus": (500, True),
        "jmq4": "refused",
        "httpmq": (503, "UNAVAILABLE", "1"),  # http-mq.md §1 has no row of its own
    }
    if refused != want:
        problems.append(diff("producing to the full queue", want, refused))

    async def counted() -> dict[str, int]:  # each front-end's engine flushes within 1 s
        refusals = await world.engine.produce_refusals()
        return refusals.get((topic, world.owner), {})

    try:  # the engine counted each refusal, whatever the protocol: the producer's alert
        await until(lambda: _at_least(counted, 4), within=5)
    except AssertionError:
        problems.append(f"refusals counted: {await counted()}, want queue_full 4")
    problems += await stored_form(world, topic, "httpmq", [Sent("m1", b"m1"), Sent("m2", b"m2")])

    # an HTTP-MQ consumer takes and acks both: room for two again, for every protocol
    got, _ = await consume_httpmq(world, topic, 2, conns)
    if [g.get("message") for g in got] != ["m1", "m2"]:
        problems.append(f"the HTTP-MQ consumer got {got}")
    reply = await vibemq.call({"id": "p4", "type": "publish", "queue": topic, "payload": "p4"})
    if reply.get("type") != "publishAck":
        problems.append(f"VibeMQ publish after the queue was emptied: {reply}")
    await zbus.send(msg("cmd: produce", f"mq: {topic}", "msgid: z4", token, body=b"z4"))
    answer = await zbus.recv()
    if answer.status != 200:
        problems.append(f"zbus produce after the queue was emptied: {answer.status} {answer.body}")

    # a VibeMQ subscriber gets those two only, not the acked ones again
    got, nothing_more = await consume_vibemq(world, "tcp", topic, 2, conns)
    if [(g["id"], g["payload"]) for g in got] != [("p4", "p4"), ("z4", "z4")]:
        problems.append(f"a VibeMQ subscriber got {got}")
    problems += await settled_everywhere(world, topic, "vibemq-tcp", nothing_more, counts, 4)
    assert not problems, "\n".join(problems)


async def _at_least(counted, n: int) -> bool:
    return (await counted()).get("queue_full", 0) >= n


async def produce_jmq4_code(world: World, topic: str, conns: Conns, out: dict) -> None:
    """Produce one JMQ4 message, record whether it was refused (code ≠ 0, index −1)."""
    raw = await jmq4_session(world, conns, AddProducerRequest(topics=(topic,), app=world.owner))
    reply = await raw.call(
        ProduceMessageRequest(
            topics=(ProduceTopic(topic=topic, messages=(message(b"j3"),)),), app=world.owner
        )
    )
    (entry,) = reply.payload.topics
    refused = entry.code != 0 and all(i.index == -1 for i in entry.items)
    out["jmq4"] = "refused" if refused else f"code {entry.code}, items {entry.items}"


@pytest.mark.parametrize("consumer", ("zbus", "vibemq-tcp"))
async def test_jmq4_priorities_order_a_priority_topics_push_consumers(
    consumer: str, world: World, conns: Conns
):
    """A PriorityBased topic: JMQ4 messages sent without a partition land in their
    priority's band, and a zbus or VibeMQ consumer gets the highest band first."""
    topic = f"x.edge.priority.{consumer}"
    sent = [(0, b"low"), (3, b"critical"), (1, b"normal"), (2, b"high"), (3, b"critical-2")]
    for priority, body in sent:
        built = build_message(
            OutgoingMessage(body, priority=priority), app=world.owner, partition=-1, compress=False
        )
        await produce_jmq4(world, topic, conns, built)
    got, _ = await CONSUME[consumer](world, topic, len(sent), conns)
    bodies = [g["payload"].encode() if "payload" in g else g["body"] for g in got]
    assert bodies == [b"critical", b"critical-2", b"high", b"normal", b"low"], got


@pytest.mark.parametrize("consumer", ["zbus", "vibemq-tcp", "vibemq-ws"])
async def test_a_groups_retries_reach_its_push_consumers(consumer: str, world: World, conns: Conns):
    topic = f"x.edge.retried.{consumer}"
    await produce_jmq4(world, topic, conns, message(b"r1", "a", k="1"))
    first, _ = await CONSUME["httpmq"](world, topic, 1, conns)  # consumed and acked
    assert len(first) == 1, first
    await until(lambda: _backlog(world, topic), within=10, what="the HTTP-MQ ack")
    [rid] = await world.engine.retry(topic, world.owner, 0, [0])
    got, _ = await CONSUME[consumer](world, topic, 1, conns)
    want = VIEW[consumer](Sent("r1", b"r1", {"k": "1"}, "a"), 0, topic)
    # delivered once before (over HTTP-MQ): a redelivery, in each protocol's words
    if consumer == "zbus":
        want["headers"]["redelivered"] = "1"
    else:
        want["headers"]["deliveryAttempts"] = "2"
    assert got == [want], diff(f"{consumer} received the retry", want, got[0] if got else {})

    async def store_empty() -> bool:
        return await world.engine.retry_counts(topic, world.owner) == (0, 0)

    await until(store_empty, within=10, what=f"retry {rid} acked over {consumer}")


async def _backlog(world: World, topic: str) -> bool:
    stats = await world.engine.group_stats(topic, world.owner)
    return stats.backlog == 0 and stats.in_flight == 0


@pytest.mark.parametrize("consumer", ["jmq4", *OTHERS])
async def test_an_mq_called_by_its_zbus_name_is_the_topic_every_protocol_uses(
    consumer: str, world: World, conns: Conns
):
    topic = f"x.edge.zbus-name.{consumer}"
    name = ZBUS_NAMES[topic]
    if consumer == "zbus":  # the other way round: produced by the code, consumed by the name
        sent = await produce_jmq4_wire(world, topic, conns)
        producer = "jmq4"
    else:
        sent = await produce_zbus(world, name, conns)
        producer = "zbus"
    problems = await stored_form(world, topic, producer, sent)
    counts = Counts(world, topic, conns)
    problems += await waiting(counts, len(sent))
    if consumer == "zbus":
        got, nothing_more = await consume_zbus(world, name, len(sent), conns)
    else:
        got, nothing_more = await CONSUME[consumer](world, topic, len(sent), conns)
    problems += compare(consumer, producer, sent, got, topic)
    problems += await settled_everywhere(world, topic, consumer, nothing_more, counts, len(sent))
    assert not problems, f"{producer} -> {consumer} on {topic} ({name}):\n" + "\n".join(problems)


@pytest.mark.parametrize("consumer", PROTOCOLS)
async def test_retention_counts_what_each_protocols_consumer_never_read(
    consumer: str, world: World, conns: Conns
):
    topic = f"x.edge.retention.{consumer}"  # keeps the last 2 messages

    async def produce(*bodies: bytes) -> None:
        if consumer == "jmq4":  # over another protocol than the consumer's
            for body in bodies:
                r = await world.mq.post(
                    "/mq/produce",
                    data={"producer": world.consumer_name(topic), "message": body.decode()},
                    headers=bearer(world.token),
                )
                assert r.status_code == 200, r.text
        else:  # one request each: retention keeps one request's messages together
            for body in bodies:
                await produce_jmq4(world, topic, conns, message(body))

    await produce(b"m0")
    first, _ = await CONSUME[consumer](world, topic, 1, conns)
    assert len(first) == 1, first
    await until(lambda: _backlog(world, topic), within=10, what=f"m0 acked over {consumer}")
    for conn in conns:  # the consumer goes away: what comes next waits for it
        await conn.close()
    conns.clear()
    await produce(b"m1", b"m2", b"m3", b"m4")

    async def nothing_in_flight() -> bool:  # a server that read ahead for the closed
        stats = await world.engine.group_stats(topic, world.owner)  # session handed it back
        return stats.in_flight == 0

    await until(nothing_in_flight, within=10, what=f"{consumer}'s session gone")
    assert await world.engine.trim(topic) == {0: 3}
    losses = await world.engine.retention_losses()
    assert losses.get((topic, world.owner)) == 2, losses  # m1 and m2, not m0
    again, _ = await CONSUME[consumer](world, topic, 1, conns)
    bodies = [g.get("payload", g.get("message", g.get("body"))) for g in again]
    assert bodies and bodies[0] in ("m3", b"m3"), again

    async def m3_acked() -> bool:  # as any batch: its position moved past it
        (row,) = await world.engine.progress(topic, world.owner)
        return row.ack_index >= 4

    await until(m3_acked, within=10, what=f"m3 acked over {consumer}")


@pytest.mark.parametrize("producer", ["zbus", "vibemq-tcp", "vibemq-ws"])
async def test_produces_without_a_partition_take_turns_over_the_partitions(
    producer: str, world: World, conns: Conns
):
    topic = f"x.edge.spread.{producer}"  # 4 partitions, equal weights
    sent: list[Sent] = []
    for _ in range(4):
        sent += await PRODUCE[producer](world, topic, conns)
    stored = [(await world.engine.bounds(topic, p))[1] for p in range(4)]
    assert stored == [len(sent) // 4] * 4, stored  # weighted random would rarely be even


LARGE_PRODUCERS = ("zbus", "vibemq-tcp")


async def produce_large(world: World, producer: str, topic: str, conns: Conns) -> dict[str, str]:
    """One message whose properties pass 32,767 bytes; returns the headers it was sent with."""
    if producer == "zbus":
        raw = await ZbusRaw.open(world.zbus_port)
        conns.append(raw)
        pad = "a" * (40 * 1024)
        await raw.send(
            msg(
                "cmd: produce",
                f"mq: {topic}",
                "msgid: L1",
                f"token: {world.token}",
                f"x-pad: {pad}",
                "x-after: end",
                body=b"large",
            )
        )
        ack = await raw.recv(5)
        assert (ack.status, ack.msgid) == (200, "L1"), ack
        return {"x-pad": pad, "x-after": "end"}
    conn = await vibemq_session(world, "tcp", conns)
    headers = {f"k{i}": chr(ord("a") + i) * 4096 for i in range(10)}
    frame = {"id": "L1", "type": "publish", "queue": topic, "payload": "large", "headers": headers}
    ack = await conn.call(frame)
    assert (ack["type"], ack["id"]) == ("publishAck", "L1"), ack
    return headers


@pytest.mark.parametrize(
    ("producer", "consumer"),
    [(p, c) for p in LARGE_PRODUCERS for c in PROTOCOLS if c != p],
)
async def test_properties_past_the_attributes_field_reach_every_protocol(
    producer: str, consumer: str, world: World, conns: Conns
):
    topic = f"x.edge.large-props.{producer}.{consumer}"
    headers = await produce_large(world, producer, topic, conns)
    counts = Counts(world, topic, conns)
    problems = await waiting(counts, 1)

    got, nothing_more = await CONSUME[consumer](world, topic, 1, conns)
    assert len(got) == 1, got
    (view,) = got
    if consumer == "jmq4":  # bound by the S2 attributes field: the lines that fit
        assert view["body"] == b"large", view
        shown = view["attributes"]
        assert all(headers.get(k, v) == v for k, v in shown.items()), shown
    else:
        have = {
            "zbus": lambda: view["headers"],
            "httpmq": lambda: view.get("properties", {}),
        }.get(consumer, lambda: view["headers"])()
        missing = {k: len(v) for k, v in headers.items() if have.get(k) != v}
        if missing:
            problems.append(f"{consumer} lost or changed headers (name: length sent) {missing}")
        body = view.get("body", view.get("payload", view.get("message")))
        if body not in (b"large", "large"):
            problems.append(f"{consumer} got the body {body!r}")
    problems += await settled_everywhere(world, topic, consumer, nothing_more, counts, 1)
    assert not problems, f"large properties {producer} -> {consumer}:\n" + "\n".join(problems)
