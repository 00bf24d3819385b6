"""CatalogSnapshot.apply: a snapshot moved forward by deltas equals one built from scratch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.engine import AppInfo, CatalogDelta, CatalogSnapshot, ConsumerPolicyInfo, TopicInfo
from brokers.engine.catalog import BrokerInfo, ProducerPolicyInfo, entity_hash

TOPICS = [f"t{i}" for i in range(6)]
APPS = [f"a{i}" for i in range(4)]

ZBUS_SUFFIXES = ("", ":z", ":y")
"""A topic's zbus name is its code and one of these (none, or renamed): unique in the
catalog, as the database's constraint keeps them."""
topics = st.builds(
    lambda code, partitions, archive, zbus: TopicInfo(
        code=code, partitions=partitions, archive=archive, zbus_name=code + zbus if zbus else ""
    ),
    st.sampled_from(TOPICS),
    st.integers(1, 4),
    st.booleans(),
    st.sampled_from(ZBUS_SUFFIXES),
)
apps = st.builds(
    lambda code, tokens, admin: AppInfo(
        code=code, token_hashes=tuple(f"{code}-{t}" for t in tokens), admin=admin
    ),
    st.sampled_from(APPS),
    st.lists(st.sampled_from(["h1", "h2", "h3", "h4", "h5"]), unique=True, max_size=2),
    st.booleans(),
)
brokers = st.builds(
    lambda i, weight: BrokerInfo(
        id=i, host="h", jmq4_port=1, zbus_port=2, vibemq_port=3, weight=weight
    ),
    st.integers(1, 3),
    st.integers(1, 5),
)
consumers = st.builds(
    lambda topic, app, paused: ConsumerPolicyInfo(
        name=f"{app}.{topic}", topic=topic, app=app, paused=paused
    ),
    st.sampled_from(TOPICS),
    st.sampled_from(APPS),
    st.booleans(),
)
producers = st.builds(
    lambda topic, app, rate: ProducerPolicyInfo(
        name=f"{app}.{topic}", topic=topic, app=app, rate_limit=rate
    ),
    st.sampled_from(TOPICS),
    st.sampled_from(APPS),
    st.none() | st.integers(1, 100),
)


@st.composite
def deltas(draw):
    consumer_updates = {}
    for info in draw(st.lists(st.none() | consumers, max_size=3)):
        if info is None:
            name = f"{draw(st.sampled_from(APPS))}.{draw(st.sampled_from(TOPICS))}"
            consumer_updates[name] = None
        else:
            consumer_updates[info.name] = info
    producer_updates = {}
    for info in draw(st.lists(st.none() | producers, max_size=3)):
        if info is None:
            name = f"{draw(st.sampled_from(APPS))}.{draw(st.sampled_from(TOPICS))}"
            producer_updates[name] = None
        else:
            producer_updates[info.name] = info
    topic_updates = {}
    for info in draw(st.lists(st.none() | topics, max_size=2)):
        topic_updates[info.code if info else draw(st.sampled_from(TOPICS))] = info
    app_updates = {}
    for info in draw(st.lists(st.none() | apps, max_size=2)):
        app_updates[info.code if info else draw(st.sampled_from(APPS))] = info
    broker_updates = {}
    for info in draw(st.lists(st.none() | brokers, max_size=1)):
        broker_updates[info.id if info else draw(st.integers(1, 3))] = info
    return CatalogDelta(
        brokers=broker_updates,
        topics=topic_updates,
        apps=app_updates,
        producers=producer_updates,
        consumers=consumer_updates,
    )


def _from_scratch(state: dict[str, dict], version: int) -> CatalogSnapshot:
    return CatalogSnapshot(
        version=version,
        brokers=state["brokers"],
        topics=state["topics"],
        apps=state["apps"],
        producers=state["producers"].values(),
        consumers=state["consumers"].values(),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(deltas(), max_size=12), st.booleans())
def test_applying_deltas_equals_building_the_result(changes, digest_first):
    snapshot = CatalogSnapshot()
    if digest_first:
        assert snapshot.digest == 0  # the digest is then kept up to date incrementally
    state: dict[str, dict] = {
        k: {} for k in ("brokers", "topics", "apps", "producers", "consumers")
    }
    seen = [snapshot]
    for version, delta in enumerate(changes, start=1):
        delta = CatalogDelta.decode(delta.encode(), version)  # as it travels
        snapshot = snapshot.apply(delta)
        seen.append(snapshot)
        for kind in state:
            for key, info in getattr(delta, kind).items():
                if info is None:
                    state[kind].pop(key, None)
                else:
                    state[kind][key] = info
    expected = _from_scratch(state, len(changes))
    assert snapshot == expected
    assert snapshot.digest == expected.digest
    for topic in TOPICS:
        assert snapshot.consumers_of(topic) == expected.consumers_of(topic)
        for name in (topic + suffix for suffix in ZBUS_SUFFIXES):
            assert snapshot.zbus_topic(name) == expected.zbus_topic(name)
            found = snapshot.zbus_topic(name)
            assert found is None or name in (found.code, found.zbus_name)
        for app in APPS:
            assert snapshot.consumer(topic, app) == expected.consumer(topic, app)
            assert snapshot.producer(topic, app) == expected.producer(topic, app)
    for token in [f"{app}-h{i}" for app in APPS for i in range(1, 6)]:
        # (token hashes are unique in the catalog, as the database's constraint keeps them)
        assert snapshot._apps_by_token_hash.get(token) == expected._apps_by_token_hash.get(token)
    # every earlier value is untouched by what followed it
    assert [s.version for s in seen] == list(range(len(changes) + 1))


def test_apply_leaves_the_old_snapshot_and_costs_the_change():
    old = CatalogSnapshot(
        version=1,
        topics=[TopicInfo(code=f"t{i}") for i in range(2_000)],
        consumers=[
            ConsumerPolicyInfo(name=f"a.t{i}", topic=f"t{i}", app="a") for i in range(2_000)
        ],
    )
    paused = ConsumerPolicyInfo(name="a.t7", topic="t7", app="a", paused=True)
    new = old.apply(CatalogDelta(version=2, consumers={"a.t7": paused}))
    assert new.consumer("t7", "a").paused and not old.consumer("t7", "a").paused
    assert new.consumers_of("t7") == (paused,)
    assert new.topics is old.topics  # untouched maps are shared, not copied
    assert new.digest == CatalogSnapshot(topics=old.topics, consumers=new.consumers).digest


def test_entity_hash_depends_on_kind_and_content():
    a = TopicInfo(code="x")
    assert entity_hash("topics", a) == entity_hash("topics", TopicInfo(code="x"))
    assert entity_hash("topics", a) != entity_hash("topics", TopicInfo(code="x", partitions=2))


def test_snapshot_round_trips_in_msgpack_json_and_pickle():
    import pickle

    snap = CatalogSnapshot(
        version=3,
        topics=[TopicInfo(code="t")],
        apps=[AppInfo(code="a", token_hashes=("h",))],
        consumers=[ConsumerPolicyInfo(name="a.t", topic="t", app="a")],
    )
    assert CatalogSnapshot.decode(snap.encode()) == snap
    assert CatalogSnapshot.decode_json(snap.encode_json()) == snap
    assert pickle.loads(pickle.dumps(snap)) == snap
