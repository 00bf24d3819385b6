"""The engine as the one gate: every produce and consume operation checks the app's
policy, blacklist, pause and rate limit, and a refusal stores and delivers nothing."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import (
    AccessDenied,
    AppInfo,
    CatalogDelta,
    CatalogSnapshot,
    ClientNotAllowed,
    ConsumerClientNotAllowed,
    ConsumerNotFound,
    ConsumerPaused,
    FetchStatus,
    InvalidMessage,
    Message,
    ProducerNotFound,
    QueueSettings,
    RateLimited,
    TopicInfo,
    TopicNotFound,
    hash_token,
)
from brokers.engine.access import blacklisted
from tests.engine.conftest import snapshot


def gated(**policy) -> CatalogSnapshot:
    """Topic ``t`` (1 partition) and queue ``q``: app ``a`` produces and consumes both with
    ``policy`` applied to both of its policies (the blacklist ``127.0.0.0/8`` when none is
    given); app ``b`` has no policy."""
    policy.setdefault("blacklist", ("127.0.0.0/8",))
    producer = {k: v for k, v in policy.items() if k in ("blacklist", "rate_limit")}
    consumer = {k: v for k, v in policy.items() if k in ("blacklist", "rate_limit", "paused")}
    topics = {"t": {"partitions": 1}, "q": {"partitions": 1, "queue": QueueSettings()}}
    return snapshot(
        topics=topics,
        producers=[{"topic": c, "app": "a", **producer} for c in topics],
        consumers=[{"topic": c, "app": "a", **consumer} for c in topics],
    )


async def take(engine, topic: str, **kw) -> list:
    return (await engine.lease(topic, "a", count=5, owner="o", **kw)).deliveries


async def stored(engine, topic: str = "t") -> int:
    low, high = await engine.bounds(topic, 0)
    return high - low


async def test_every_produce_path_refuses_an_app_without_a_producer_policy(make_engine):
    engine = make_engine(gated())
    msg = Message(b"x")
    with pytest.raises(ProducerNotFound):
        await engine.append("t", "b", [msg])
    with pytest.raises(ProducerNotFound):
        await engine.append_delayed("t", "b", msg, deliver_at_ms=engine.now_ms())
    with pytest.raises(ProducerNotFound):
        await engine.append_many("q", "b", [msg])
    with pytest.raises(ProducerNotFound):
        await engine.prepare_transaction("t", "b")
    tx = await engine.prepare_transaction("t", "a")
    with pytest.raises(ProducerNotFound):
        await engine.append_to_transaction("t", "b", tx, [msg])
    assert await stored(engine) == 0 and await engine.delayed_pending("t") == 0
    assert (await engine.queue_stats("q")).backlog == 0
    await engine.append("t", "a", [msg])
    assert await stored(engine) == 1


async def test_every_consume_path_refuses_an_app_without_a_consumer_policy(make_engine):
    engine = make_engine(gated())
    await engine.append("t", "a", [Message(b"x")])
    await engine.append_many("q", "a", [Message(b"y")])
    with pytest.raises(ConsumerNotFound):
        await engine.fetch("t", "b")
    with pytest.raises(ConsumerNotFound):
        await engine.consume_read("t", "b", 0, 0)
    with pytest.raises(ConsumerNotFound):
        await engine.lease("q", "b", count=5, owner="o")
    with pytest.raises(ConsumerNotFound):
        await engine.lease("q", "b", count=5, owner="o", client_id="1")
    # nothing was leased away from the rightful consumer
    assert (await engine.fetch("t", "a")).found
    assert [d.message.body for d in await take(engine, "q")] == [b"y"]


async def test_blacklisted_addresses_neither_produce_nor_consume(make_engine):
    engine = make_engine(gated(blacklist=("10.1.0.0/16", "2001:db8::/32")))
    for address in ("10.1.2.3:5000", "[2001:db8::1]:80", "::ffff:10.1.0.9", "10.1.9.9"):
        with pytest.raises(ClientNotAllowed):
            await engine.append("t", "a", [Message(b"x")], client_address=address)
        with pytest.raises(ClientNotAllowed):
            await engine.append_many("q", "a", [Message(b"x")], client_address=address)
    assert await stored(engine) == 0
    await engine.append("t", "a", [Message(b"ok")], client_address="10.2.0.1:1")
    await engine.append_many("q", "a", [Message(b"ok")], client_address="10.2.0.1")
    fetched = await engine.fetch("t", "a", address="10.1.0.1:1")
    assert fetched.status is FetchStatus.BLACKLISTED and not fetched.messages
    with pytest.raises(ConsumerClientNotAllowed):
        await engine.lease("q", "a", address="10.1.0.1", count=5, owner="o")
    with pytest.raises(ConsumerClientNotAllowed):
        await engine.consume_read("t", "a", 0, 0, address="10.1.0.1")
    with pytest.raises(AccessDenied):
        engine.authorize_consumer("t", "a", "10.1.0.1")
    assert (await engine.fetch("t", "a", address="10.2.0.1:1")).found


async def test_a_paused_consumer_gets_nothing_and_may_still_subscribe(make_engine):
    engine = make_engine(gated(paused=True))
    await engine.append("t", "a", [Message(b"x")])
    await engine.append_many("q", "a", [Message(b"y")])
    assert (await engine.fetch("t", "a")).status is FetchStatus.PAUSED
    assert await take(engine, "q") == []
    with pytest.raises(ConsumerPaused):
        await engine.consume_read("t", "a", 0, 0)
    assert await take(engine, "q", client_id="1") == []
    assert engine.authorize_consumer("q", "a") is False  # subscribing is allowed
    engine.set_snapshot(gated())  # resumed
    assert engine.authorize_consumer("q", "a") is True
    assert [d.message.body for d in await take(engine, "q")] == [b"y"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"paused": True}, FetchStatus.PAUSED),
        ({"blacklist": ("10.9.0.0/16",)}, FetchStatus.BLACKLISTED),
        (None, ConsumerNotFound),  # the policy deleted
    ],
)
async def test_a_parked_long_poll_meets_the_gate_of_now(make_engine, change, expected):
    """A pause, a blacklist or a deleted policy stops a long poll that was parked before
    it: the append that wakes it is not delivered to it (DESIGN.md, "Who may do what")."""
    engine = make_engine(gated(blacklist=()))
    poll = asyncio.create_task(
        engine.fetch("t", "a", long_poll_ms=5000, address="10.9.0.1:1", owner="o")
    )
    await asyncio.sleep(0.2)
    assert not poll.done()
    if change is None:
        engine.set_snapshot(
            snapshot(
                topics={"t": {"partitions": 1}},
                producers=[{"topic": "t", "app": "a", "blacklist": ()}],
                consumers=[],
            )
        )
    else:
        engine.set_snapshot(gated(**{"blacklist": (), **change}))
    await engine.append("t", "a", [Message(b"x")], client_address="10.8.0.1:1")
    if isinstance(expected, FetchStatus):
        assert (await asyncio.wait_for(poll, 2)).status is expected
    else:
        with pytest.raises(expected):
            await asyncio.wait_for(poll, 2)
    engine.set_snapshot(gated(blacklist=()))  # allowed again: the message is still there
    got = await engine.fetch("t", "a", address="10.9.0.1:1")
    assert [d.message.body for d in got.messages] == [b"x"]


async def test_producer_rate_limit_refuses_beyond_its_permits_and_stores_nothing_more(
    make_engine,
):
    engine = make_engine(gated(rate_limit=3))
    await engine.append("t", "a", [Message(b"1"), Message(b"2")])
    await engine.append("t", "a", [Message(b"3")])
    with pytest.raises(RateLimited) as refused:
        await engine.append("t", "a", [Message(b"4")])
    assert refused.value.retry_after_ms > 0 and refused.value.code == "RATE_LIMITED"
    assert await stored(engine) == 3
    with pytest.raises(RateLimited):
        await engine.append_delayed("t", "a", Message(b"5"), deliver_at_ms=engine.now_ms())
    assert await engine.delayed_pending("t") == 0


async def test_append_many_to_a_queue_stores_what_the_rate_limit_admits(
    make_engine,
):
    engine = make_engine(gated(rate_limit=2))
    results = await engine.append_many("q", "a", [Message(b"%d" % i) for i in range(5)])
    assert [type(r).__name__ for r in results] == ["AppendResult"] * 2 + ["RateLimited"] * 3
    assert (await engine.queue_stats("q")).backlog == 2


async def test_consumer_rate_limit_costs_a_permit_per_fetch_and_per_message(make_engine, clock):
    engine = make_engine(gated(rate_limit=3))
    await engine.append("t", "a", [Message(b"%d" % i) for i in range(5)])
    first = await engine.fetch("t", "a", count=2)  # 1 for the fetch + 2 messages
    assert len(first.messages) == 2
    await engine.ack("t", "a", first.partition, range(first.start, first.end))
    limited = await engine.fetch("t", "a")
    assert limited.status is FetchStatus.RATE_LIMITED and not limited.messages
    clock.advance(2)  # blocked for a second, then refilled
    assert (await engine.fetch("t", "a", count=1)).found


async def test_a_fetch_given_back_unsent_is_refunded_and_not_counted(make_engine, clock):
    """A server that read more than its response could carry gives the lock back with
    what it did not send: those permits come back, and no traffic is counted for them."""
    engine = make_engine(gated(rate_limit=3))
    await engine.append("t", "a", [Message(b"%d" % i) for i in range(5)])
    start = engine.now_ms()
    first = await engine.fetch("t", "a", count=2)  # 1 for the fetch + 2 messages
    assert await engine.unlock("t", "a", first.partition, unsent=first.messages)
    again = await engine.fetch("t", "a", count=2)  # the 2 came back: 1 + 2 again fits
    assert [d.index for d in again.messages] == [d.index for d in first.messages]
    await engine.counters.flush()
    rows = await engine.counters.traffic("app", "a", start, engine.now_ms() + 1)
    assert sum(r.consumed for r in rows) == 2


async def test_pushed_deliveries_are_capped_by_the_consumer_rate_limit(make_engine):
    engine = make_engine(
        snapshot(
            topics={"q": {"partitions": 1, "queue": QueueSettings()}},
            consumers=[{"topic": "q", "app": "a", "rate_limit": 2}],
        )
    )
    for i in range(5):
        await engine.append_many("q", "a", [Message(b"%d" % i)])
    assert len(await take(engine, "q")) == 2
    with pytest.raises(RateLimited):
        await take(engine, "q")
    assert (await engine.group_stats("q", "a")).ready == 3  # nothing taken beyond the permits


async def test_malformed_names_are_invalid_before_any_permission(make_engine):
    engine = make_engine(gated())
    for topic in ("a\x00\x01\nb", "", "x" * 300):
        with pytest.raises(InvalidMessage):
            await engine.append(topic, "a", [Message(b"x")])
        with pytest.raises(InvalidMessage):
            engine.authorize_producer(topic, "a")
    with pytest.raises(InvalidMessage):
        engine.authorize_consumer("t", "bad\napp")
    with pytest.raises(TopicNotFound):
        engine.authorize_producer("nothere", "a")


async def test_an_implicit_dead_letter_queue_follows_its_queues_policies(make_engine):
    snap = snapshot(
        topics={"q": {"partitions": 1, "queue": QueueSettings(dead_letter_enabled=True)}},
        producers=[{"topic": "q", "app": "a"}],
        consumers=[{"topic": "q", "app": "a"}],
    )
    engine = make_engine(snap)
    assert engine.authorize_consumer("q.dlq", "a") is True
    with pytest.raises(ConsumerNotFound):
        engine.authorize_consumer("q.dlq", "b")
    with pytest.raises(TopicNotFound):
        engine.authorize_consumer("other.dlq", "a")


def test_app_for_token_is_the_one_lookup() -> None:
    snap = CatalogSnapshot(
        apps={
            "a": AppInfo(code="a", token_hashes=(hash_token("tok-a"), hash_token("tok-a2"))),
            "b": AppInfo(code="b", token_hashes=(hash_token("tok-b"),)),
        }
    )
    assert snap.app_for_token("tok-a").code == "a"
    assert snap.app_for_token("tok-a2").code == "a"
    assert snap.app_for_token("tok-b").code == "b"
    for bad in (None, "", "tok-c", "tok-a "):
        assert snap.app_for_token(bad) is None


_v4 = st.ip_addresses(v=4)
_v6 = st.ip_addresses(v=6)


@given(
    address=st.one_of(_v4, _v6),
    networks=st.lists(
        st.one_of(
            st.tuples(_v4, st.integers(0, 32)),
            st.tuples(_v6, st.integers(0, 128)),
        ),
        max_size=4,
    ),
    port=st.integers(1, 65535),
)
def test_blacklist_matches_exactly_the_listed_networks(address, networks, port) -> None:
    entries = tuple(str(ipaddress.ip_network(f"{ip}/{n}", strict=False)) for ip, n in networks)
    forms = [address]
    if address.version == 6 and address.ipv4_mapped is not None:
        forms.append(address.ipv4_mapped)  # ::ffff:10.0.0.1 is also 10.0.0.1
    expected = any(
        form in net
        for net in map(ipaddress.ip_network, entries)
        for form in forms
        if form.version == net.version
    )
    text = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
    assert blacklisted(text, entries) is expected
    assert blacklisted(str(address), entries) is expected


async def test_append_many_charges_each_message_as_if_sent_alone(make_engine):
    engine = make_engine(gated(rate_limit=2))
    results = await engine.append_many("t", "a", [Message(b"%d" % i) for i in range(5)])
    assert [type(r).__name__ for r in results] == ["AppendResult"] * 2 + ["RateLimited"] * 3
    assert [r.first_index for r in results[:2]] == [0, 1]
    assert await stored(engine) == 2
    with pytest.raises(ClientNotAllowed):
        await engine.append_many("t", "a", [Message(b"x")], client_address="127.0.0.1")


async def test_append_many_fails_an_invalid_message_alone(make_engine):
    engine = make_engine(gated())
    bad = Message(b"x", business_id="b" * 1000)
    results = await engine.append_many("t", "a", [Message(b"1"), bad, Message(b"3")])
    assert [type(r).__name__ for r in results] == ["AppendResult", "InvalidMessage", "AppendResult"]
    assert await stored(engine) == 2


async def test_consumer_terms_change_only_with_what_the_consumer_depends_on(make_engine):
    """What a front-end compares across catalog versions to know whether a caught-up
    consumer must look again: a change to another topic or app leaves the terms equal (a
    rebuilt snapshot too); a paused policy, a changed topic, another app's token do not."""
    engine = make_engine(gated())
    before = engine.consumer_terms("q", "a")
    engine.set_snapshot(gated())  # the same catalog, every object rebuilt
    assert engine.consumer_terms("q", "a") == before
    elsewhere = gated()
    elsewhere = elsewhere.apply(
        CatalogDelta(version=2, topics={"other": TopicInfo(code="other", partitions=1)})
    )
    engine.set_snapshot(elsewhere)
    assert engine.consumer_terms("q", "a") == before
    engine.set_snapshot(gated(paused=True))
    assert engine.consumer_terms("q", "a") != before
    assert engine.consumer_terms("t", "a") != engine.consumer_terms("q", "a")
    # a dead-letter queue without a topic of its own is governed by its queue's policy
    dlq = snapshot(
        topics={"q": {"partitions": 1, "queue": QueueSettings(dead_letter_enabled=True)}},
    )
    engine.set_snapshot(dlq)
    held = engine.consumer_terms("q.dlq", "a")
    engine.set_snapshot(
        snapshot(
            topics={"q": {"partitions": 1, "queue": QueueSettings(dead_letter_enabled=True)}},
            consumers=[{"topic": "q", "app": "a", "paused": True}],
        )
    )
    assert engine.consumer_terms("q.dlq", "a") != held
