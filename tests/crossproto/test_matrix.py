"""Done-when of issue 17: a message produced over any protocol is consumed over every other
one with its body bytes and properties intact, and the counts agree afterwards.

Five protocols — JMQ4, zbus, VibeMQ over TCP, VibeMQ over WebSocket, HTTP-MQ — make 20
ordered pairs, each on a topic of its own (``x.<producer>.<consumer>``, 1 partition),
through real sockets: the in-process JMQ4, zbus and VibeMQ servers and a live daphne for
HTTP-MQ and ``/ws/vibemq``. Every pair, as the owner app (one consumer group: its consumer
policy on the topic):

1. produces its protocol's messages (:mod:`.wire`) and checks the STORED form — body
   bytes, businessId, the one properties map — so a failure says which side is wrong;
2. checks every count of the group says the whole batch is waiting: the engine's
   ``group_stats`` / ``queue_stats`` / progress lag, zbus admin ``data``
   ``unconsumedMsgCount`` (and ``inFlightMsgCount`` 0), VibeMQ ``queueInfo``
   ``messageCount`` (and ``inFlightCount`` 0) over TCP and over WebSocket, the HTTP-MQ
   progress record's maxOffset − committedOffset, the console API's consumer lag and the
   console page's "Total lag";
3. consumes over the other protocol and acks/settles the way that protocol does, and
   compares what arrived, in order, with the consumer protocol's view of each sent
   message (:mod:`.wire` defines each view: that is "intact" per pair);
4. checks nothing is delivered twice: the consumer gets nothing more, and a JMQ4 fetch and
   an HTTP-MQ fetch of the same group get nothing either;
5. checks every count of step 2 now says 0 waiting, 0 in flight, and the ack index is past
   the batch.

Every mismatch of a pair is collected and reported together (sent, stored, received).
"""

from __future__ import annotations

import pytest

from tests.crossproto.conftest import PAIRS, World, topic_for
from tests.crossproto.wire import (
    CONSUME,
    PRODUCE,
    Conns,
    Counts,
    Sent,
    compare,
    settled_everywhere,
    stored_form,
)

pytestmark = [
    pytest.mark.asyncio(loop_scope="package"),
    # the test database (the catalog is the module's, committed; a test writes nothing)
    pytest.mark.django_db,
]


@pytest.mark.parametrize(("producer", "consumer"), PAIRS, ids=[f"{p}-to-{c}" for p, c in PAIRS])
async def test_produced_over_one_protocol_consumed_over_another_intact_and_counted(
    producer: str, consumer: str, world: World, conns: Conns
):
    topic = topic_for(producer, consumer)
    problems: list[str] = []

    # 1. produce, and the stored form: one properties map, bytes as sent
    sent: list[Sent] = await PRODUCE[producer](world, topic, conns)
    n = len(sent)
    problems += await stored_form(world, topic, producer, sent)

    # 2. every count: the whole batch waits
    counts = Counts(world, topic, conns)
    before = await counts.settle_at(waiting=n, stored=n)
    if before:
        problems.append("counts after producing (expected all waiting):\n  " + "\n  ".join(before))

    # 3. consume over the other protocol, ack/settle, compare with its view of each message
    got, nothing_more = await CONSUME[consumer](world, topic, n, conns)
    problems += compare(consumer, producer, sent, got, topic)

    # 4, 5. nothing twice, and every count at 0 waiting, 0 in flight
    problems += await settled_everywhere(world, topic, consumer, nothing_more, counts, n)

    assert not problems, f"{producer} -> {consumer} on {topic}:\n" + "\n".join(problems)
