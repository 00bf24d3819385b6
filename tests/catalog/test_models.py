"""Catalog validation: clear messages from full_clean, and the database constraints behind them."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from brokers.models import App, Broker, ConsumerPolicy, PartitionGroup, ProducerPolicy, Team, Topic
from brokers.topology import create_partition_groups, split_partitions, spread_leaders
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def team() -> Team:
    return Team.objects.create(name="t1")


@pytest.fixture
def cluster():
    return factories.cluster_with_brokers()


def errors_of(obj) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as exc:
        obj.full_clean()
    return exc.value.message_dict


@pytest.mark.parametrize("code", ["", "..", "has space", "bad/slash", "x" * 257, "é"])
def test_topic_code_rejected(code, team, cluster):
    t = Topic(code=code, cluster=cluster, team=team)
    assert "code" in errors_of(t)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("partitions", 0),
        ("partitions", 1025),
        ("retention_max_age_s", 10),
        ("retention_max_count", 0),
        ("max_queue_size", 0),
        ("max_queue_size", 10_000_001),
        ("max_retry_attempts", 101),
        ("zbus_mode", 8),
        ("type", "weird"),
        ("delivery_mode", "Sometimes"),
    ],
)
def test_topic_ranges(field, value, team, cluster):
    t = Topic(code="ok", cluster=cluster, team=team, **{field: value})
    assert field in errors_of(t)


def test_redirect_to_dlq_needs_dead_letters(team, cluster):
    t = Topic(code="q", cluster=cluster, team=team, overflow_policy="RedirectToDlq")
    errs = errors_of(t)
    assert "RedirectToDlq" in errs["dead_letter_enabled"][0]
    with pytest.raises(IntegrityError), transaction.atomic():
        Topic.objects.create(code="q", cluster=cluster, team=team, overflow_policy="RedirectToDlq")


@pytest.mark.parametrize(
    ("field", "value"),
    [("partitions", 0), ("partitions", 2000), ("type", "weird"), ("zbus_mode", 9)],
)
def test_topic_constraints_hold_without_full_clean(field, value, team, cluster):
    with pytest.raises(IntegrityError), transaction.atomic():
        Topic.objects.create(code="raw", cluster=cluster, team=team, **{field: value})


def test_topic_code_unique_across_clusters(team, cluster):
    other = factories.cluster_with_brokers("c2", first_id=10)
    Topic.objects.create(code="dup", cluster=cluster, team=team)
    t = Topic(code="dup", cluster=other, team=team)
    assert "code" in errors_of(t)


def test_broker_ports_must_differ_and_be_in_range(cluster):
    b = Broker(id=9, cluster=cluster, host="h", jmq4_port=1000, zbus_port=1000, vibemq_port=1001)
    assert "must differ" in errors_of(b)["__all__"][0]
    b = Broker(id=9, cluster=cluster, host="h", jmq4_port=70000)
    assert "jmq4_port" in errors_of(b)
    with pytest.raises(IntegrityError), transaction.atomic():
        Broker.objects.create(id=9, cluster=cluster, host="h", jmq4_port=70000)


def test_partition_group_validation(team, cluster):
    t = Topic.objects.create(code="pg", cluster=cluster, team=team, partitions=2)
    leader = Broker.objects.first()
    for parts, msg in [([], "blank"), ([0, 0], "only once"), ([5], "0–1"), ([-1], "≥ 0")]:
        g = PartitionGroup(topic=t, group_id=0, leader=leader, partitions=parts)
        assert msg in errors_of(g)["partitions"][0]


def test_policy_validation(team, cluster):
    t = Topic.objects.create(code="t", cluster=cluster, team=team)
    a = App.objects.create(code="a", team=team)
    p = ProducerPolicy(topic=t, app=a, blacklist=["10.0.0.1", "nope"], weights={"x": 1})
    errs = errors_of(p)
    assert "nope" in errs["blacklist"][0]
    assert "weights" in errs
    p = ProducerPolicy(topic=t, app=a, weights={"99": 5})
    assert "99" in errors_of(p)["weights"][0]
    c = ConsumerPolicy(topic=t, app=a, batch_size=0, ack_timeout_ms=10, read_retry_probability=101)
    errs = errors_of(c)
    assert {"batch_size", "ack_timeout_ms", "read_retry_probability"} <= set(errs)
    c = ConsumerPolicy(topic=t, app=a, sequential=True, mode="broadcast")
    assert "clustering" in errors_of(c)["sequential"][0]
    bt = Topic.objects.create(code="bt", cluster=cluster, team=team, type="broadcast")
    c = ConsumerPolicy(topic=bt, app=a, mode="clustering")
    assert "broadcast" in errors_of(c)["mode"][0]


def test_policy_default_name_and_uniqueness(team, cluster):
    t = Topic.objects.create(code="t", cluster=cluster, team=team)
    a = App.objects.create(code="a", team=team)
    p = ProducerPolicy.objects.create(topic=t, app=a)
    assert p.name == "a.t"
    with pytest.raises(IntegrityError), transaction.atomic():
        ProducerPolicy.objects.create(topic=t, app=a, name="other")
    with pytest.raises(IntegrityError), transaction.atomic():
        ConsumerPolicy.objects.create(topic=t, app=a, batch_size=0)


def test_app_tokens_are_hashed_and_rotate(team):
    a = App.objects.create(code="a", team=team)
    first = a.issue_token()
    assert first not in str(list(a.tokens.values()))
    assert len(a.active_token_hashes()) == 1
    second = a.issue_token()
    assert second != first
    assert len(a.active_token_hashes()) == 1
    assert a.tokens.count() == 2


def test_split_partitions():
    assert split_partitions(4, 2) == [[0, 1], [2, 3]]
    assert split_partitions(5, 3) == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError):
        split_partitions(2, 3)


def test_spread_leaders_follows_weights(cluster):
    b1, b2 = Broker.objects.order_by("id")
    b1.weight, b2.weight = 200, 100
    picks = [b.id for b in spread_leaders([b1, b2], 6)]
    assert picks.count(1) == 4 and picks.count(2) == 2
    b1.weight = 100
    assert [b.id for b in spread_leaders([b1, b2], 4)] == [1, 2, 1, 2]


def test_create_partition_groups_only_on_writable_brokers(team, cluster):
    Broker.objects.filter(id=1).update(writable=False)
    t = Topic.objects.create(code="t", cluster=cluster, team=team, partitions=4)
    groups = create_partition_groups(t, 2)
    assert [g.partitions for g in groups] == [[0, 1], [2, 3]]
    assert {g.leader_id for g in groups} == {2}
    with pytest.raises(ValidationError):
        create_partition_groups(t, 2)
    Broker.objects.update(writable=False)
    t2 = Topic.objects.create(code="t2", cluster=cluster, team=team, partitions=4)
    with pytest.raises(ValidationError) as exc:
        create_partition_groups(t2, 2)
    assert "writable" in str(exc.value)
