"""A fleet-sized catalog for console list tests and measurements: 10,000 topics of 4
partitions in two partition groups, each with a producer and a consumer policy of one
app (20,000 policies), the latest lag the backlog check records for each consumer, and
10 minutes of traffic rollups per topic.

Everything is written with ``bulk_create``: it sends no ``post_save``, so none of the
per-row catalog publishing of :mod:`brokers.signals` runs (creating rows one by one
would publish the catalog on every commit). Publish once afterwards where a test needs
the engine to know the topics.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection

from brokers.models import (
    App,
    Broker,
    Cluster,
    ConsumerPolicy,
    PartitionGroup,
    ProducerPolicy,
    Team,
    Topic,
)
from mqcloud.alerts.models import LatestLag
from pipeline.models import TrafficMinute

BATCH = 2000


@dataclass(frozen=True)
class Fleet:
    teams: list[Team]
    cluster: Cluster
    app: App
    topics: int


def build_fleet(topics: int = 10_000, *, rollup_minutes: int = 10) -> Fleet:
    """``topics`` topics ``t00000``… alternately of teams ``fleet-red``/``fleet-blue``,
    with the policies of app ``fleet`` (team fleet-red) on each; see the module doc."""
    teams = Team.objects.bulk_create([Team(name="fleet-red"), Team(name="fleet-blue")])
    cluster = Cluster.objects.bulk_create([Cluster(name="fleet-c")])[0]
    Broker.objects.bulk_create(
        [
            Broker(id=bid, cluster=cluster, host="127.0.0.1", jmq4_port=50000 + bid,
                   zbus_port=51000 + bid, vibemq_port=52000 + bid, status=Broker.Status.UP)
            for bid in (101, 102)
        ]
    )  # fmt: skip
    rows = Topic.objects.bulk_create(
        [
            Topic(
                code=f"t{i:05d}",
                cluster=cluster,
                team=teams[i % 2],
                partitions=4,
                description=f"fleet topic number {i}",
            )
            for i in range(topics)
        ],
        batch_size=BATCH,
    )
    PartitionGroup.objects.bulk_create(
        [
            PartitionGroup(topic=t, group_id=g, leader_id=101 + g, preferred_leader_id=101 + g,
                           partitions=[2 * g, 2 * g + 1])
            for t in rows
            for g in (0, 1)
        ],
        batch_size=BATCH,
    )  # fmt: skip
    app = App.objects.bulk_create([App(code="fleet", team=teams[0])])[0]
    ProducerPolicy.objects.bulk_create(
        [ProducerPolicy(name=f"fleet.{t.code}", topic=t, app=app) for t in rows], batch_size=BATCH
    )
    consumers = ConsumerPolicy.objects.bulk_create(
        [
            ConsumerPolicy(name=f"fleet.{t.code}", topic=t, app=app, paused=i % 7 == 0)
            for i, t in enumerate(rows)
        ],
        batch_size=BATCH,
    )
    now = datetime.now(UTC)
    LatestLag.objects.bulk_create(
        [
            LatestLag(consumer=c, lag=(i * 7919) % 100_000, oldest_age_s=float(i % 600),
                      measured_at=now)
            for i, c in enumerate(consumers)
        ],
        batch_size=BATCH,
    )  # fmt: skip
    last = now.replace(second=0, microsecond=0) - timedelta(minutes=2)
    TrafficMinute.objects.bulk_create(
        [
            TrafficMinute(dimension="topic", name=t.code, minute=last - timedelta(minutes=m),
                          messages=(i * 31 + m) % 5000, bytes=((i * 31 + m) % 5000) * 100,
                          latency_p50_ms=1, latency_p99_ms=3)
            for i, t in enumerate(rows)
            for m in range(rollup_minutes)
        ],
        batch_size=BATCH * 5,
    )  # fmt: skip
    # A fleet grows over days, and autovacuum keeps the planner's statistics in step with
    # it. Bulk-loaded in one go after other tests emptied these tables, the statistics may
    # still describe near-empty tables, and the planner then picks nested loops over
    # 10,000 rows: pages took 10 to 70 s in a test session that ran tests/api first.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return Fleet(teams, cluster, app, topics)


def list_pages() -> list[str]:
    """Every console page that lists fleet-sized data, as an admin opens it."""
    return [
        "/",
        "/topics/",
        "/topics/?sort=-partitions&page=37",
        "/topics/?q=t09&team=fleet-blue",
        "/topics/t00042/",
        "/consumers/",
        "/consumers/?sort=-lag",
        "/consumers/?state=paused&page=3",
        "/apps/",
        "/apps/fleet/",
        "/apps/fleet/?c_page=40&p_sort=-name",
        "/brokers/101/",
        "/alerts/",
        "/audit/",
        "/applications/?scope=team",
        "/applications/queue/",
        "/notifications/",
        "/tokens/",
        "/lockouts/",
        "/users/",
        "/teams/",
        "/teams/fleet-red/",
        "/clusters/",
        "/applications/new/?kind=consumer_create",
        "/applications/new/?kind=pause",
        "/applications/new/?kind=topic_update&code=t00042",
    ]
