"""The catalog log on Redis: small deltas, resync after a gap, checkpoints, monotonic versions."""

from __future__ import annotations

import pytest
import redis
from django.db import transaction

from brokers.catalog_loader import build_snapshot, follow_catalog, publish
from brokers.engine import CatalogDelta, CatalogFollower, TopicInfo
from brokers.engine.catalog import LOG_KEY, VERSION_KEY
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(redis_url):
    c = redis.Redis.from_url(redis_url)
    c.flushall()
    yield c
    c.close()


@pytest.fixture
def fleet(client):
    """Twenty topics, each with a producer and a consumer policy, and a published snapshot."""
    team = Team.objects.create(name="fleet")
    cluster = factories.cluster_with_brokers("fleet-c", brokers=2, first_id=40)
    app, _token = factories.app("fleet-app", team)
    for i in range(20):
        topic = factories.topic(f"fleet{i}", cluster, team, partitions=2, groups=1)
        ProducerPolicy.objects.create(topic=topic, app=app)
        ConsumerPolicy.objects.create(topic=topic, app=app)
    publish()
    return app


def _pause(name: str, paused: bool = True) -> None:
    policy = ConsumerPolicy.objects.get(name=name)
    policy.paused = paused
    policy.save()


def _last_delta(client: redis.Redis) -> tuple[CatalogDelta, int]:
    ((entry_id, fields),) = client.xrevrange(LOG_KEY, count=1)
    version = int(entry_id.split(b"-")[0])
    return CatalogDelta.decode(fields[b"d"], version), len(fields[b"d"])


def test_a_policy_change_is_one_small_delta(fleet, client):
    before = int(client.get(VERSION_KEY))
    _pause("fleet-app.fleet3")
    delta, size = _last_delta(client)
    assert delta.version == before + 1 == int(client.get(VERSION_KEY))
    assert (
        list(delta.consumers) == ["fleet-app.fleet3"] and delta.consumers["fleet-app.fleet3"].paused
    )
    assert list(delta.topics) == ["fleet3"]  # its topic, re-read for its archive flag
    assert not delta.producers and not delta.apps and not delta.brokers
    assert size < 1_000


def test_one_transaction_is_one_delta_and_a_delete_is_a_removal(fleet, client):
    before = int(client.get(VERSION_KEY))
    with transaction.atomic():
        _pause("fleet-app.fleet1")
        ConsumerPolicy.objects.get(name="fleet-app.fleet2").delete()
    delta, _ = _last_delta(client)
    assert delta.version == before + 1
    assert delta.consumers["fleet-app.fleet2"] is None
    assert delta.consumers["fleet-app.fleet1"].paused


def test_a_follower_that_missed_a_delta_resyncs_to_the_database(fleet, client):
    follower = CatalogFollower()
    follow_catalog(client, follower)
    _pause("fleet-app.fleet4")
    _pause("fleet-app.fleet5")
    entries = client.xrange(LOG_KEY, min=follower.log_start())
    assert len(entries) == 2
    assert follower.follow(entries[1:]) is False  # the first one never arrived: a gap
    assert follower.current.version == int(entries[0][0].split(b"-")[0]) - 1
    follow_catalog(client, follower)  # the log still has it: read in order
    assert follower.resyncs == 0
    assert follower.current.consumer("fleet5", "fleet-app").paused

    # Asleep while the log moved past a newer snapshot: only the snapshot can bring it back.
    behind = CatalogFollower(follower.current)
    _pause("fleet-app.fleet4", False)
    checkpoint = publish().version  # the snapshot is stored at the version before it
    client.xtrim(LOG_KEY, minid=checkpoint, approximate=False)
    follow_catalog(client, behind)
    assert behind.resyncs == 1
    assert behind.current.version == int(client.get(VERSION_KEY))
    assert behind.current.same_catalog(build_snapshot())


def test_a_gap_redis_cannot_bridge_keeps_the_catalog_until_a_snapshot(fleet, client):
    follower = CatalogFollower()
    follow_catalog(client, follower)
    served = follower.current
    _pause("fleet-app.fleet6")
    _pause("fleet-app.fleet7")
    first = client.xrange(LOG_KEY, min=follower.log_start())[0][0]
    client.xdel(LOG_KEY, first)  # lost for everyone
    follow_catalog(client, follower)
    assert follower.current is served  # never an older or a half-applied catalog
    publish()  # beat's rebuild
    follow_catalog(client, follower)
    assert follower.current.version > served.version
    assert follower.current.same_catalog(build_snapshot())
    assert follower.current.consumer("fleet6", "fleet-app").paused


def test_a_checkpoint_that_disagrees_reloads_the_catalog(fleet, client):
    follower = CatalogFollower()
    follow_catalog(client, follower)
    version = follower.current.version
    wrong = follower.current.replace(
        topics={**follower.current.topics, "ghost": TopicInfo(code="ghost")}
    )
    follower.current = wrong  # a catalog that drifted from the database's
    follower._remember(wrong)
    publish()  # its checkpoint names the database's digest at `version`
    follow_catalog(client, follower)
    assert follower.resyncs == 1
    assert follower.current.version == version + 1
    assert "ghost" not in follower.current.topics
    assert follower.current.same_catalog(build_snapshot())


def test_versions_only_rise_through_gaps_snapshots_and_a_redis_wipe(fleet, client):
    follower = CatalogFollower()
    versions = []

    def step() -> None:
        follow_catalog(client, follower)
        versions.append(follower.current.version)

    step()
    _pause("fleet-app.fleet8")
    step()
    publish()
    step()
    client.xtrim(LOG_KEY, maxlen=0, approximate=False)  # the log trimmed away entirely
    _pause("fleet-app.fleet9")
    step()
    client.flushall()  # Redis lost everything: the next change publishes a full snapshot
    _pause("fleet-app.fleet10")
    step()
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert follower.current.same_catalog(build_snapshot())
    assert int(client.get(VERSION_KEY)) == follower.current.version


def test_a_team_rename_reaches_its_topics_and_apps(fleet, client):
    team = Team.objects.get(name="fleet")
    team.name = "fleet-renamed"
    team.save()
    delta, _ = _last_delta(client)
    assert {info.team for info in delta.topics.values()} == {"fleet-renamed"}
    assert len(delta.topics) == 20 and set(delta.apps) == {"fleet-app"}
