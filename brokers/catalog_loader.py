"""Build the engine's catalog snapshot from the database and publish it on Redis.

``build_snapshot()`` reads the whole catalog in a handful of queries and returns a
frozen :class:`brokers.engine.catalog.CatalogSnapshot`. ``publish()`` stores it in Redis
and announces its version, so every broker, proxy and engine process picks it up within
a second (``CatalogWatcher``). Signals call ``publish_on_commit()`` after every catalog
change; Celery beat republishes periodically as a safety net.
"""

from __future__ import annotations

import logging
import time

import redis
from django.conf import settings
from django.db import transaction

from brokers.engine import RECORD_LEADER_LUA, leader_records
from brokers.engine.catalog import (
    INVALIDATION_CHANNEL,
    SNAPSHOT_KEY,
    SNAPSHOT_VERSION_KEY,
    STORE_IF_NEWER,
    AppInfo,
    BrokerInfo,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    QueueSettings,
    TopicInfo,
)
from brokers.models import App, Broker, ConsumerPolicy, ProducerPolicy, Topic

log = logging.getLogger(__name__)

VERSION_COUNTER_KEY = "mqcloud:catalog:version-counter"


def build_snapshot(version: int = 0) -> CatalogSnapshot:
    """Read the catalog and return it as an immutable snapshot."""
    brokers = {
        b.id: BrokerInfo(
            id=b.id,
            host=b.host,
            jmq4_port=b.jmq4_port,
            zbus_port=b.zbus_port,
            vibemq_port=b.vibemq_port,
            data_center=b.data_center,
            weight=b.weight,
            readable=b.readable,
            writable=b.writable,
            alive=b.status != Broker.Status.DOWN,
        )
        for b in Broker.objects.all()
    }
    archived_topics = set(
        ProducerPolicy.objects.filter(archive=True).values_list("topic__code", flat=True)
    ) | set(ConsumerPolicy.objects.filter(archive=True).values_list("topic__code", flat=True))
    anonymous = dict(App.objects.filter(is_anonymous=True).values_list("team_id", "code"))
    topics = {}
    for t in Topic.objects.select_related("team").prefetch_related("groups"):
        topics[t.code] = TopicInfo(
            code=t.code,
            type=t.type,
            partitions=t.partitions,
            groups=tuple(
                PartitionGroupInfo(
                    group_id=g.group_id,
                    leader=g.leader_id,
                    partitions=tuple(g.partitions),
                    preferred_leader=g.preferred_leader_id,
                )
                for g in t.groups.all()
            ),
            retention_max_age_s=t.retention_max_age_s,
            retention_max_count=t.retention_max_count,
            queue=QueueSettings(
                delivery_mode=t.delivery_mode,
                max_queue_size=t.max_queue_size,
                overflow_policy=t.overflow_policy,
                message_ttl_ms=t.message_ttl_ms,
                dead_letter_enabled=t.dead_letter_enabled,
                max_retry_attempts=t.max_retry_attempts,
            ),
            zbus_mode=t.zbus_mode,
            zbus_token_hash=t.zbus_token_hash,
            creator=t.creator,
            created_ms=int(t.created_at.timestamp() * 1000),
            archive=t.code in archived_topics,
            team=t.team.name,
            anonymous_app=anonymous.get(t.team_id, ""),
        )
    apps = {
        a.code: AppInfo(
            code=a.code,
            team=a.team.name,
            admin=a.is_admin,
            token_hashes=tuple(a.active_token_hashes()),
        )
        for a in App.objects.select_related("team").prefetch_related("tokens")
    }
    producers = tuple(
        ProducerPolicyInfo(
            name=p.name,
            topic=p.topic.code,
            app=p.app.code,
            nearby=p.nearby,
            single=p.single,
            archive=p.archive,
            weights={int(k): v for k, v in p.weights.items()},
            blacklist=tuple(p.blacklist),
            timeout_ms=p.timeout_ms,
            http_enabled=p.http_enabled,
            rate_limit=p.rate_limit,
        )
        for p in ProducerPolicy.objects.select_related("topic", "app")
    )
    consumers = tuple(
        ConsumerPolicyInfo(
            name=c.name,
            topic=c.topic.code,
            app=c.app.code,
            nearby=c.nearby,
            paused=c.paused,
            archive=c.archive,
            retry=c.retry,
            sequential=c.sequential,
            ack_timeout_ms=c.ack_timeout_ms,
            batch_size=c.batch_size,
            concurrent=c.concurrent,
            delay_ms=c.delay_ms,
            blacklist=tuple(c.blacklist),
            err_times=c.err_times,
            max_partition_num=c.max_partition_num,
            read_retry_probability=c.read_retry_probability,
            broadcast=c.mode == ConsumerPolicy.Mode.BROADCAST,
            http_enabled=c.http_enabled,
            rate_limit=c.rate_limit,
            backlog_alert_count=c.backlog_alert_count,
            backlog_alert_age_s=c.backlog_alert_age_s,
            pull_timeout_ms=c.pull_timeout_ms,
            start_position=c.start_position,
        )
        for c in ConsumerPolicy.objects.select_related("topic", "app")
    )
    return CatalogSnapshot(
        version=version,
        brokers=brokers,
        topics=topics,
        apps=apps,
        producers=producers,
        consumers=consumers,
    )


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def publish() -> CatalogSnapshot:
    """Build a snapshot with the next version, store it in Redis and announce it.

    Each partition's leader is recorded in Redis first (:mod:`brokers.engine.leadership`):
    from then on a broker that still believes it leads a partition failover moved away
    has its JMQ4 appends refused, before any broker sees the new snapshot."""
    client = _redis()
    try:
        version = int(client.incr(VERSION_COUNTER_KEY))
        snapshot = build_snapshot(version)
        record_leaders(client, snapshot)
        client.eval(
            STORE_IF_NEWER,
            2,
            SNAPSHOT_KEY,
            SNAPSHOT_VERSION_KEY,
            snapshot.encode(),
            version,
            INVALIDATION_CHANNEL,
        )
        return snapshot
    finally:
        client.close()


def record_leaders(client: redis.Redis, snapshot: CatalogSnapshot, chunk: int = 1000) -> None:
    """Record every partition's leader of ``snapshot`` in Redis, unless a newer catalog
    version already did (pipelined, ``chunk`` partitions per round trip)."""
    script = client.register_script(RECORD_LEADER_LUA)
    records = list(leader_records(snapshot))
    for start in range(0, len(records), chunk):
        pipe = client.pipeline(transaction=False)
        for key, leader in records[start : start + chunk]:
            script(keys=[key], args=[leader, snapshot.version], client=pipe)
        pipe.execute()


def publish_on_commit() -> None:
    """Publish a fresh snapshot once the current transaction commits (once per transaction).

    A transaction that touches many catalog rows publishes one snapshot, built after the
    commit; outside a transaction the snapshot is published at once.
    """
    connection = transaction.get_connection()
    if any(callback is _publish_logged for _, callback, _ in connection.run_on_commit):
        return
    transaction.on_commit(_publish_logged)


def _publish_logged() -> None:
    started = time.monotonic()
    try:
        snapshot = publish()
    except redis.RedisError:
        log.exception("could not publish the catalog snapshot; beat will retry")
        return
    log.debug(
        "catalog v%s published in %.1f ms", snapshot.version, (time.monotonic() - started) * 1000
    )


def current_snapshot() -> CatalogSnapshot:
    """The snapshot stored in Redis, for synchronous callers (an empty one if none yet)."""
    client = _redis()
    try:
        data = client.get(SNAPSHOT_KEY)
    finally:
        client.close()
    return CatalogSnapshot.decode(data) if data else CatalogSnapshot()
