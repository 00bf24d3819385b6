"""The catalog's entities as the engine sees them: frozen structs, one per row kind.

The catalog lives in PostgreSQL (``brokers.models``); the engine never touches Django.
A loader in ``brokers.catalog_loader`` turns database rows into these structs; a
:class:`~brokers.engine.catalog.snapshot.CatalogSnapshot` holds all of them and a
:class:`~brokers.engine.catalog.snapshot.CatalogDelta` carries the changed ones.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

import msgspec

TOPIC_TYPES = ("normal", "broadcast", "sequential")
DELIVERY_MODES = ("RoundRobin", "FanOutWithAck", "FanOutWithoutAck", "PriorityBased")
OVERFLOW_POLICIES = ("DropOldest", "DropNewest", "BlockPublisher", "RedirectToDlq")


def hash_token(token: str) -> str:
    """Return the stored form of an app token (tokens are random, so SHA-256 suffices)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class BrokerInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
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


class PartitionGroupInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A partition group: the partitions one leader broker serves."""

    group_id: int
    leader: int
    partitions: tuple[int, ...]
    preferred_leader: int | None = None
    """The broker that should lead the group; FETCH_CLUSTER lists it once it is up."""


class QueueSettings(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
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
    dead_letter_queue: str = ""
    """Where its dead letters go: this topic (a catalog topic of that name, or an implicit
    one served under this topic's policies); empty: ``<code>.dlq``."""


class TopicInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A topic with its partitions, retention and per-protocol settings."""

    code: str
    type: str = "normal"
    partitions: int = 1
    groups: tuple[PartitionGroupInfo, ...] = ()
    retention_max_age_s: int | None = None
    retention_max_count: int | None = None
    send_limit: int | None = None
    """Messages per second the topic takes from all its producers together (None: no
    topic-wide limit)."""
    send_back_limit: int | None = None
    """Failed messages per second its consumers together may copy into their retry
    stores (None: no limit)."""
    queue: QueueSettings = QueueSettings()
    zbus_mode: int = 0
    zbus_token_hash: str = ""
    zbus_name: str = ""
    """The topic's zbus MQ name where that is not its code (zbus names may hold ``:`` or
    any UTF-8 letter, codes may not); empty: zbus clients call it by its code."""
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


class AppInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
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


class ProducerPolicyInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
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


class ConsumerPolicyInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
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
