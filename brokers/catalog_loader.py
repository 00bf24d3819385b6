"""Turn catalog rows into the engine's catalog and publish it on Redis: deltas and snapshots.

Every committed catalog change becomes one small versioned delta (:class:`CatalogDelta`)
holding the new state of just the rows it touched: the model signals record what changed
(:func:`changed_on_commit`) and one callback per transaction reads those rows back and
appends the delta to the catalog log on Redis, so every broker, proxy and console process
applies it within a second at a cost proportional to the change. :func:`publish` rebuilds
the whole snapshot (at start, from ``publishcatalog``, and periodically from Celery beat,
whose checkpoint lets every process check its catalog against the database's).

Publishers take one PostgreSQL advisory lock while they read the rows and take a version,
so a later version always carries a later reading of the database.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from redis.client import Pipeline

from brokers.commit_batch import add_to_commit_batch
from brokers.engine import RECORD_LEADER_LUA, CatalogDelta, CatalogFollower, leader_records
from brokers.engine.catalog import (
    APPEND_DELTA,
    APPEND_DELTA_KEYS,
    LOG_KEY,
    LOG_READ_BATCH,
    SNAPSHOT_KEY,
    STORE_SNAPSHOT,
    STORE_SNAPSHOT_KEYS,
    VERSION_KEY,
    AppInfo,
    BrokerInfo,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    QueueSettings,
    TopicInfo,
    decode_snapshot,
    delta_args,
    newest_version,
    next_read,
    snapshot_args,
    version_floor,
)
from brokers.models import App, Broker, ConsumerPolicy, ProducerPolicy, Topic

log = logging.getLogger(__name__)

CATALOG_LOCK = 0x6D71_636C  # "mqcl": the advisory lock of catalog publishers


# -- rows → entities ---------------------------------------------------------------------


def broker_info(b: Broker) -> BrokerInfo:
    """The engine's view of one broker row."""
    return BrokerInfo(
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


def topic_info(t: Topic, *, archived: bool, anonymous_app: str) -> TopicInfo:
    """The engine's view of one topic row (``team`` and ``groups`` prefetched).

    ``archived``: whether any policy on it archives; ``anonymous_app``: its team's
    anonymous app code, or ""."""
    return TopicInfo(
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
            for g in sorted(t.groups.all(), key=lambda g: g.group_id)
        ),
        retention_max_age_s=t.retention_max_age_s,
        retention_max_count=t.retention_max_count,
        send_limit=t.send_limit,
        send_back_limit=t.send_back_limit,
        queue=QueueSettings(
            delivery_mode=t.delivery_mode,
            max_queue_size=t.max_queue_size,
            overflow_policy=t.overflow_policy,
            message_ttl_ms=t.message_ttl_ms,
            dead_letter_enabled=t.dead_letter_enabled,
            max_retry_attempts=t.max_retry_attempts,
            dead_letter_queue=t.dead_letter_queue,
        ),
        zbus_mode=t.zbus_mode,
        zbus_token_hash=t.zbus_token_hash,
        zbus_name=t.zbus_name or "",
        creator=t.creator,
        created_ms=int(t.created_at.timestamp() * 1000),
        archive=archived,
        team=t.team.name,
        anonymous_app=anonymous_app,
    )


def app_info(a: App) -> AppInfo:
    """The engine's view of one app row (``team`` and ``tokens`` prefetched)."""
    return AppInfo(
        code=a.code,
        team=a.team.name,
        admin=a.is_admin,
        token_hashes=tuple(sorted(a.active_token_hashes())),
    )


def producer_info(p: ProducerPolicy) -> ProducerPolicyInfo:
    """The engine's view of one producer policy row (``topic`` and ``app`` joined)."""
    return ProducerPolicyInfo(
        name=p.name,
        topic=p.topic.code,
        app=p.app.code,
        nearby=p.nearby,
        single=p.single,
        archive=p.archive,
        weights={int(k): v for k, v in sorted(p.weights.items(), key=lambda kv: int(kv[0]))},
        blacklist=tuple(p.blacklist),
        timeout_ms=p.timeout_ms,
        http_enabled=p.http_enabled,
        rate_limit=p.rate_limit,
    )


def consumer_info(c: ConsumerPolicy) -> ConsumerPolicyInfo:
    """The engine's view of one consumer policy row (``topic`` and ``app`` joined)."""
    return ConsumerPolicyInfo(
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


def topic_infos(topics: QuerySet[Topic]) -> dict[str, TopicInfo]:
    """Topic entities of the ``topics`` queryset, read in two queries: the rows with their
    team, archive flag and team's anonymous app, then their partition groups."""
    rows = (
        topics.select_related("team")
        .prefetch_related("groups")
        .annotate(
            archived=Exists(ProducerPolicy.objects.filter(topic=OuterRef("pk"), archive=True))
            | Exists(ConsumerPolicy.objects.filter(topic=OuterRef("pk"), archive=True)),
            anonymous_app=Subquery(
                App.objects.filter(team=OuterRef("team"), is_anonymous=True).values("code")[:1]
            ),
        )
    )
    return {
        t.code: topic_info(t, archived=t.archived, anonymous_app=t.anonymous_app or "")
        for t in rows
    }


def build_snapshot(version: int = 0) -> CatalogSnapshot:
    """Read the whole catalog and return it as an immutable snapshot."""
    return CatalogSnapshot(
        version=version,
        brokers=[broker_info(b) for b in Broker.objects.all()],
        topics=topic_infos(Topic.objects.all()),
        apps=[app_info(a) for a in App.objects.select_related("team").prefetch_related("tokens")],
        producers=[producer_info(p) for p in ProducerPolicy.objects.select_related("topic", "app")],
        consumers=[consumer_info(c) for c in ConsumerPolicy.objects.select_related("topic", "app")],
    )


# -- what changed ------------------------------------------------------------------------


@dataclass
class CatalogChanges:
    """The catalog rows one transaction touched, by the keys the catalog uses."""

    brokers: set[int] = field(default_factory=set)
    topics: set[str] = field(default_factory=set)
    topic_ids: set[int] = field(default_factory=set)
    apps: set[str] = field(default_factory=set)
    app_ids: set[int] = field(default_factory=set)
    producers: set[str] = field(default_factory=set)
    consumers: set[str] = field(default_factory=set)
    teams: set[int] = field(default_factory=set)
    """Teams whose every topic and app is re-read (a renamed team, a new anonymous app)."""

    def __bool__(self) -> bool:
        return any(vars(self).values())

    def merge(self, other: CatalogChanges) -> None:
        """Add every key of ``other``."""
        for name, keys in vars(other).items():
            getattr(self, name).update(keys)

    def __call__(self) -> None:
        """The on-commit callback: publish these changes as one delta (logged on failure;
        beat's periodic rebuild repairs a delta lost to a Redis outage)."""
        started = time.monotonic()
        try:
            version = publish_changes(self)
        except (redis.RedisError, OSError):
            log.exception("could not publish a catalog change; beat's rebuild will repair it")
            return
        log.debug("catalog v%s published in %.1f ms", version, (time.monotonic() - started) * 1000)


def changed_on_commit(
    *,
    brokers: Iterable[int] = (),
    topics: Iterable[str] = (),
    topic_ids: Iterable[int] = (),
    apps: Iterable[str] = (),
    app_ids: Iterable[int] = (),
    producers: Iterable[str] = (),
    consumers: Iterable[str] = (),
    teams: Iterable[int] = (),
) -> None:
    """Publish these catalog rows' new state once the current transaction commits.

    All changes of one transaction become one delta, read after the commit; outside a
    transaction the delta is published at once."""
    changes = CatalogChanges(
        set(brokers),
        set(topics),
        set(topic_ids),
        set(apps),
        set(app_ids),
        set(producers),
        set(consumers),
        set(teams),
    )
    if changes:
        add_to_commit_batch(CatalogChanges, lambda pending: pending.merge(changes))


def build_delta(changes: CatalogChanges) -> CatalogDelta:
    """The current state of every row ``changes`` names (None for rows gone), read in a
    few queries — one per kind of row changed — whatever the size of the catalog."""
    app_codes = set(changes.apps)
    teams = set(changes.teams)
    if changes.app_ids:
        app_codes |= set(App.objects.filter(id__in=changes.app_ids).values_list("code", flat=True))
    if app_codes:  # an anonymous app's team: its topics name it
        teams |= set(
            App.objects.filter(code__in=app_codes, is_anonymous=True).values_list(
                "team_id", flat=True
            )
        )
    if changes.teams:
        app_codes |= set(
            App.objects.filter(team_id__in=changes.teams).values_list("code", flat=True)
        )

    brokers: dict[int, BrokerInfo | None] = dict.fromkeys(changes.brokers)
    if changes.brokers:
        brokers.update(
            (b.id, broker_info(b)) for b in Broker.objects.filter(id__in=changes.brokers)
        )
    topics: dict[str, TopicInfo | None] = dict.fromkeys(changes.topics)
    if changes.topics or changes.topic_ids or teams:
        wanted = Q(code__in=changes.topics) | Q(id__in=changes.topic_ids) | Q(team_id__in=teams)
        topics.update(topic_infos(Topic.objects.filter(wanted)))
    apps: dict[str, AppInfo | None] = dict.fromkeys(app_codes)
    if app_codes:
        apps.update(
            (a.code, app_info(a))
            for a in App.objects.filter(code__in=app_codes)
            .select_related("team")
            .prefetch_related("tokens")
        )
    producers: dict[str, ProducerPolicyInfo | None] = dict.fromkeys(changes.producers)
    if changes.producers:
        producers.update(
            (p.name, producer_info(p))
            for p in ProducerPolicy.objects.filter(name__in=changes.producers).select_related(
                "topic", "app"
            )
        )
    consumers: dict[str, ConsumerPolicyInfo | None] = dict.fromkeys(changes.consumers)
    if changes.consumers:
        consumers.update(
            (c.name, consumer_info(c))
            for c in ConsumerPolicy.objects.filter(name__in=changes.consumers).select_related(
                "topic", "app"
            )
        )
    return CatalogDelta(
        brokers=brokers, topics=topics, apps=apps, producers=producers, consumers=consumers
    )


# -- publishing --------------------------------------------------------------------------


_clients: dict[str, redis.Redis] = {}


def _redis() -> redis.Redis:
    """This process's Redis client for publishing (thread-safe, pooled; per URL, so a
    test's fresh server gets its own)."""
    client = _clients.get(settings.REDIS_URL)
    if client is None:
        client = _clients[settings.REDIS_URL] = redis.Redis.from_url(settings.REDIS_URL)
    return client


def _lock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [CATALOG_LOCK])


def _unlock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s)", [CATALOG_LOCK])


@contextlib.contextmanager
def _catalog_lock() -> Iterator[None]:
    """Hold the publishers' advisory lock (session level, so it also works in autocommit)."""
    _lock()
    try:
        yield
    finally:
        _unlock()


def publish_changes(changes: CatalogChanges) -> int:
    """Read the rows ``changes`` names and append them to the catalog log as the next
    version; returns it. Publishes a full snapshot instead when Redis has no catalog."""
    client = _redis()
    with _catalog_lock():
        delta = build_delta(changes)
        if not len(delta):
            return 0
        expected = int(client.get(VERSION_KEY) or 0) + 1
        pipe = client.pipeline(transaction=False)  # the leaders, then the delta: one trip
        _queue_leaders(pipe, leader_records(delta.topics.values()), expected)
        pipe.eval(APPEND_DELTA, 2, *APPEND_DELTA_KEYS, *delta_args(delta))
        version = int(pipe.execute()[-1])
    if version:
        return version
    log.warning("Redis holds no catalog version: publishing a full snapshot")
    return publish().version


def publish() -> CatalogSnapshot:
    """Rebuild the whole snapshot from the database, store it in Redis and append its
    checkpoint, so every process checks its catalog against this one.

    The snapshot is labelled with the newest version published before it was read:
    the database is read in one REPEATABLE READ transaction begun under the publishers'
    lock, so it holds every change published up to that version (and maybe some after,
    which their deltas carry again). Each partition's leader is recorded first
    (:mod:`brokers.engine.leadership`): a broker that still believes it leads a partition
    failover moved away has its JMQ4 appends refused before any broker sees the catalog.

    Returns the snapshot at its checkpoint's version: the version a process has once it
    holds this catalog."""
    client = _redis()
    snapshot = _read_consistent_snapshot(client)
    record_leaders(client, snapshot.topics.values(), snapshot.version)
    args = snapshot_args(snapshot)
    checkpoint = int(client.eval(STORE_SNAPSHOT, 4, *STORE_SNAPSHOT_KEYS, *args))
    if not checkpoint:  # a newer snapshot was stored meanwhile
        return snapshot
    # What every process holds once it applied the checkpoint (the version to wait for).
    return snapshot.apply(CatalogDelta(version=checkpoint))


def _read_consistent_snapshot(client: redis.Redis) -> CatalogSnapshot:
    if connection.in_atomic_block:  # cannot open our own transaction: lock for the whole read
        with _catalog_lock():
            return build_snapshot(_published_version(client))
    _lock()  # before the transaction: its snapshot must be taken while we hold the lock
    locked = True
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                version = _published_version(client)
                cursor.execute("SELECT 1")  # the transaction's snapshot is taken here
            _unlock()
            locked = False
            return build_snapshot(version)
    finally:
        if locked:
            _unlock()


def _published_version(client: redis.Redis) -> int:
    value = client.get(VERSION_KEY)
    return int(value) if value is not None else version_floor()


def record_leaders(
    client: redis.Redis, topics: Iterable[TopicInfo | None], version: int, chunk: int = 1000
) -> None:
    """Record the leader of every partition of ``topics`` in Redis as set by catalog
    ``version``, unless a newer version already did (``chunk`` partitions per round trip)."""
    records = list(leader_records(topics))
    for start in range(0, len(records), chunk):
        pipe = client.pipeline(transaction=False)
        _queue_leaders(pipe, records[start : start + chunk], version)
        pipe.execute()


def _queue_leaders(pipe: Pipeline, records: Iterable[tuple[str, int]], version: int) -> None:
    """Queue leader ``records`` ((partition meta key, leader) pairs) on ``pipe``: EVAL, not
    EVALSHA, since a pipeline of registered scripts asks SCRIPT EXISTS on every execution,
    and Redis caches the body's compiled form by its hash anyway."""
    for key, leader in records:
        pipe.eval(RECORD_LEADER_LUA, 1, key, leader, version)


# -- reading -----------------------------------------------------------------------------

process_catalog = CatalogFollower()
"""This process's catalog, for its synchronous readers (:func:`current_snapshot`) and the
console's engine sessions alike: one copy per process, caught up through the log."""


def current_snapshot() -> CatalogSnapshot:
    """The newest catalog in Redis, for synchronous callers (an empty one if none yet).

    This process keeps the last one it read and catches up through the log."""
    follow_catalog(_redis(), process_catalog)
    return process_catalog.current


def follow_catalog(client: redis.Redis, follower: CatalogFollower) -> None:
    """Bring ``follower`` to the newest catalog in Redis (the synchronous twin of
    :func:`brokers.engine.catch_up`)."""
    pipe = client.pipeline(transaction=False)
    pipe.get(VERSION_KEY)
    pipe.xrange(LOG_KEY, min=follower.log_start(), count=LOG_READ_BATCH)
    value, batch = pipe.execute()
    newest = newest_version(value)
    if follower.follow([*batch, *_read_log(client, next_read(batch))], newest):
        return
    snapshot = decode_snapshot(client.get(SNAPSHOT_KEY))
    entries = _read_log(client, f"{snapshot.version + 1}-0")
    if not follower.rebase(snapshot, entries, newest):
        log.error(
            "catalog v%d: Redis cannot bridge to the newest version", follower.current.version
        )


def _read_log(client: redis.Redis, start: str | None) -> list:
    entries: list = []
    while start is not None:
        batch = client.xrange(LOG_KEY, min=start, count=LOG_READ_BATCH)
        entries.extend(batch)
        start = next_read(batch)
    return entries
