"""Immutable catalog snapshot handed to the engine, and its Redis transport.

The catalog lives in PostgreSQL (``brokers.models``); the engine never touches Django.
A loader in ``brokers.catalog_loader`` turns the database rows into the frozen structs
below, stores the encoded snapshot in Redis and publishes its version on a channel.
Every engine, broker and proxy process keeps a :class:`CatalogWatcher`, which swaps in
the new snapshot as soon as the invalidation arrives (well under a second), so policy
changes made in the console never need a restart.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import logging
from collections.abc import Callable, Mapping

import msgspec
import redis.asyncio as aioredis

from brokers.engine.background import cancel_and_wait

log = logging.getLogger(__name__)

SNAPSHOT_KEY = "mqcloud:{catalog}:snapshot"
SNAPSHOT_VERSION_KEY = "mqcloud:{catalog}:version"
INVALIDATION_CHANNEL = "mqcloud:catalog:changed"

# Store a snapshot only if it is newer than the stored one (a slow publisher must not
# overwrite a newer catalog), then announce it. Both keys share the {catalog} hash slot.
STORE_IF_NEWER = """
local cur = redis.call('GET', KEYS[2])
if cur and tonumber(cur) >= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 1
"""

TOPIC_TYPES = ("normal", "broadcast", "sequential")
DELIVERY_MODES = ("RoundRobin", "FanOutWithAck", "FanOutWithoutAck", "PriorityBased")
OVERFLOW_POLICIES = ("DropOldest", "DropNewest", "BlockPublisher", "RedirectToDlq")


def hash_token(token: str) -> str:
    """Return the stored form of an app token (tokens are random, so SHA-256 suffices)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class BrokerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One broker process as the catalog knows it."""

    id: int
    host: str
    jmq4_port: int
    zbus_port: int
    vibemq_port: int
    data_center: str = ""
    weight: int = 1
    readable: bool = True
    writable: bool = True
    alive: bool = True

    @property
    def permission(self) -> int:
        """JMQ4 permission bits: bit0 readable, bit1 writable."""
        return (1 if self.readable else 0) | (2 if self.writable else 0)


class PartitionGroupInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A partition group: the partitions one leader broker serves."""

    group_id: int
    leader: int
    partitions: tuple[int, ...]
    preferred_leader: int | None = None
    """The broker that should lead the group; FETCH_CLUSTER lists it once it is up."""


class QueueSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Queue behaviour of a topic, whatever protocol produces or consumes it: delivery
    mode, bound and overflow, TTL, dead-letter queue and retry limit of its groups."""

    delivery_mode: str = "RoundRobin"
    max_queue_size: int | None = None
    """Most unsettled messages per partition (the slowest group's backlog); None: no bound
    (a log kept by its retention)."""
    overflow_policy: str = "DropOldest"
    message_ttl_ms: int | None = None
    dead_letter_enabled: bool = False
    max_retry_attempts: int = 3


class TopicInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A topic with its partitions, retention and per-protocol settings."""

    code: str
    type: str = "normal"
    partitions: int = 1
    groups: tuple[PartitionGroupInfo, ...] = ()
    retention_max_age_s: int | None = None
    retention_max_count: int | None = None
    queue: QueueSettings = QueueSettings()
    zbus_mode: int = 0
    zbus_token_hash: str = ""
    creator: str = ""
    created_ms: int = 0
    archive: bool = False
    team: str = ""
    anonymous_app: str = ""
    """The app a client without an app token acts as on this topic (its team's anonymous
    app; empty when the team has none). It may do only what its policies on the topic
    allow: a topic is open to token-less clients only where someone gave it policies."""

    def leader_of(self, partition: int) -> int | None:
        """Return the broker id leading ``partition``, or None if it is not in a group."""
        for group in self.groups:
            if partition in group.partitions:
                return group.leader
        return None

    def partitions_led_by(self, broker_id: int) -> tuple[int, ...]:
        """Return the partitions whose group leader is ``broker_id``, in order."""
        return tuple(sorted(p for g in self.groups if g.leader == broker_id for p in g.partitions))


class AppInfo(msgspec.Struct, frozen=True, kw_only=True):
    """An application: the identity producers and consumers authenticate as."""

    code: str
    team: str = ""
    token_hashes: tuple[str, ...] = ()
    admin: bool = False

    def check_token(self, token: str | None) -> bool:
        """Compare ``token`` with every active token hash in constant time."""
        if not token:
            return False
        candidate = hash_token(token)
        ok = False
        for stored in self.token_hashes:
            ok |= hmac.compare_digest(candidate, stored)
        return ok


class ProducerPolicyInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What one app may do when producing to one topic (JMQ4 producer policy)."""

    name: str
    topic: str
    app: str
    nearby: bool = False
    single: bool = False
    archive: bool = False
    weights: Mapping[int, int] = {}
    blacklist: tuple[str, ...] = ()
    timeout_ms: int = 5_000
    http_enabled: bool = False
    rate_limit: int | None = None


class ConsumerPolicyInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What one app may do when consuming one topic (JMQ4 consumer policy + MQCloud)."""

    name: str
    topic: str
    app: str
    nearby: bool = False
    paused: bool = False
    archive: bool = False
    retry: bool = True
    sequential: bool = False
    ack_timeout_ms: int = 300_000
    batch_size: int = 32
    concurrent: int = 1
    delay_ms: int = 0
    blacklist: tuple[str, ...] = ()
    err_times: int = 16
    max_partition_num: int = 0
    read_retry_probability: int = 0
    broadcast: bool = False
    http_enabled: bool = False
    rate_limit: int | None = None
    backlog_alert_count: int = 10_000
    backlog_alert_age_s: int = 300
    pull_timeout_ms: int = 10_000
    start_position: str = "latest"


class CatalogSnapshot(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """Everything the engine and the protocol servers need from the catalog."""

    version: int = 0
    brokers: Mapping[int, BrokerInfo] = {}
    topics: Mapping[str, TopicInfo] = {}
    apps: Mapping[str, AppInfo] = {}
    producers: tuple[ProducerPolicyInfo, ...] = ()
    consumers: tuple[ConsumerPolicyInfo, ...] = ()

    @functools.cached_property
    def _apps_by_token_hash(self) -> dict[str, AppInfo]:
        return {h: app for app in self.apps.values() for h in app.token_hashes}

    def app_for_token(self, token: str | None) -> AppInfo | None:
        """The app whose active token is ``token``, or None — the one token lookup of
        every front-end. The token is looked up by its SHA-256 (what the catalog stores),
        so the secret is never compared byte by byte; the hash found is then confirmed
        with ``compare_digest``."""
        if not token:
            return None
        digest = hash_token(token)
        app = self._apps_by_token_hash.get(digest)
        if app is None:
            return None
        ok = False
        for stored in app.token_hashes:
            ok |= hmac.compare_digest(digest, stored)
        return app if ok else None

    @functools.cached_property
    def _producers_by_pair(self) -> dict[tuple[str, str], ProducerPolicyInfo]:
        return {(p.topic, p.app): p for p in self.producers}

    @functools.cached_property
    def _consumers_by_pair(self) -> dict[tuple[str, str], ConsumerPolicyInfo]:
        return {(c.topic, c.app): c for c in self.consumers}

    @functools.cached_property
    def _consumers_by_topic(self) -> dict[str, tuple[ConsumerPolicyInfo, ...]]:
        out: dict[str, list[ConsumerPolicyInfo]] = {}
        for c in self.consumers:
            out.setdefault(c.topic, []).append(c)
        return {k: tuple(v) for k, v in out.items()}

    def consumers_of(self, topic: str) -> tuple[ConsumerPolicyInfo, ...]:
        """Every consumer policy (consumer group) on ``topic``."""
        return self._consumers_by_topic.get(topic, ())

    @functools.cached_property
    def _producers_by_name(self) -> dict[str, ProducerPolicyInfo]:
        return {p.name: p for p in self.producers}

    @functools.cached_property
    def _consumers_by_name(self) -> dict[str, ConsumerPolicyInfo]:
        return {c.name: c for c in self.consumers}

    def producer(self, topic: str, app: str) -> ProducerPolicyInfo | None:
        """Return the producer policy of ``app`` on ``topic``, if any."""
        return self._producers_by_pair.get((topic, app))

    def consumer(self, topic: str, app: str) -> ConsumerPolicyInfo | None:
        """Return the consumer policy of ``app`` on ``topic``, if any."""
        return self._consumers_by_pair.get((topic, app))

    def producer_named(self, name: str) -> ProducerPolicyInfo | None:
        """Return the producer policy called ``name`` (HTTP-MQ addresses it so)."""
        return self._producers_by_name.get(name)

    def consumer_named(self, name: str) -> ConsumerPolicyInfo | None:
        """Return the consumer policy called ``name``."""
        return self._consumers_by_name.get(name)

    def encode(self) -> bytes:
        """Serialise for storage in Redis."""
        return msgspec.msgpack.encode(self)

    @classmethod
    def decode(cls, data: bytes) -> CatalogSnapshot:
        """Inverse of :meth:`encode`."""
        return msgspec.msgpack.decode(data, type=cls)


async def publish_snapshot(client: aioredis.Redis, snapshot: CatalogSnapshot) -> None:
    """Store ``snapshot`` in Redis (unless a newer one is there) and tell every watcher."""
    await client.eval(
        STORE_IF_NEWER,
        2,
        SNAPSHOT_KEY,
        SNAPSHOT_VERSION_KEY,
        snapshot.encode(),
        snapshot.version,
        INVALIDATION_CHANNEL,
    )


async def load_snapshot(client: aioredis.Redis) -> CatalogSnapshot:
    """Read the current snapshot from Redis (an empty one if none was published yet)."""
    data = await client.get(SNAPSHOT_KEY)
    return CatalogSnapshot.decode(data) if data else CatalogSnapshot()


class CatalogWatcher:
    """Keeps the newest catalog snapshot of this process, refreshed on invalidation.

    ``current`` is always a complete snapshot; listeners registered with
    :meth:`on_change` are called with each new one. A periodic reload covers a missed
    pub/sub message (for example across a Redis reconnect).
    """

    def __init__(self, client: aioredis.Redis, *, resync_interval: float = 5.0) -> None:
        self._client = client
        self._resync_interval = resync_interval
        self._listeners: list[Callable[[CatalogSnapshot], None]] = []
        self._task: asyncio.Task[None] | None = None
        self.current = CatalogSnapshot()

    def on_change(self, listener: Callable[[CatalogSnapshot], None]) -> None:
        """Call ``listener`` with every snapshot that replaces the current one."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Load the snapshot and start following invalidations."""
        await self.refresh()
        self._task = asyncio.create_task(self._follow(), name="catalog-watcher")

    async def stop(self) -> None:
        """Stop following invalidations."""
        await cancel_and_wait(self._task)
        self._task = None

    async def refresh(self) -> None:
        """Reload the snapshot from Redis now."""
        snapshot = await load_snapshot(self._client)
        if snapshot.version != self.current.version or snapshot.version == 0:
            self.current = snapshot
            for listener in self._listeners:
                listener(snapshot)

    async def _follow(self) -> None:
        while True:
            try:
                async with self._client.pubsub() as pubsub:
                    await pubsub.subscribe(INVALIDATION_CHANNEL)
                    await self.refresh()
                    while True:
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=self._resync_interval
                        )
                        await self.refresh()
                        del message
            except asyncio.CancelledError:
                raise
            except Exception:  # a Redis hiccup must not end the watcher
                log.exception("catalog watcher lost Redis; retrying")
                await asyncio.sleep(0.5)
