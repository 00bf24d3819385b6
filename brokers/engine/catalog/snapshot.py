"""The catalog as one immutable value, and the versioned deltas that move it forward.

A :class:`CatalogSnapshot` holds every broker, topic, app and policy of one catalog
version in persistent hash maps (``immutables.Map``, the HAMT behind ``contextvars``), with
the lookups the front-ends need (token → app, (topic, app) → policy, topic → consumer
groups) kept beside them. :meth:`CatalogSnapshot.apply` returns the next version from a
:class:`CatalogDelta` — the new state of each entity one catalog change touched, ``None``
for one it removed — in time proportional to the size of the change, not of the catalog,
as Kafka's KRaft brokers apply metadata records instead of reloading everything. The old
value stays valid for whoever still reads it.

Every snapshot has a :attr:`~CatalogSnapshot.digest`: the sum, modulo 2**64, of a hash of
each entity. A process that applied deltas compares it with the digest a full rebuild from
the database announced for the same version (a checkpoint) and reloads the full snapshot
when they differ.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable, Iterable, Mapping
from hashlib import blake2b
from typing import Any, TypeVar

import msgspec
from immutables import Map

from brokers.engine.catalog.entities import (
    AppInfo,
    BrokerInfo,
    ConsumerPolicyInfo,
    ProducerPolicyInfo,
    TopicInfo,
    hash_token,
)

_MASK = (1 << 64) - 1
_ENCODER = msgspec.msgpack.Encoder()
_KIND_TAGS = {
    "brokers": b"b",
    "topics": b"t",
    "apps": b"a",
    "producers": b"p",
    "consumers": b"c",
}

V = TypeVar("V")


def entity_hash(kind: str, info: msgspec.Struct) -> int:
    """The 64-bit hash of one catalog entity of ``kind`` (its tag and encoded fields)."""
    data = _KIND_TAGS[kind] + _ENCODER.encode(info)
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "little")


class Checkpoint(msgspec.Struct, frozen=True, array_like=True):
    """A full rebuild's word on the catalog: at ``version`` its digest was ``digest``."""

    version: int
    digest: int


class CatalogDelta(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One catalog change: the new state of every entity it touched, None where the
    entity was removed. Deltas carry state, not operations, so applying one over a
    snapshot that already holds it changes nothing."""

    version: int = 0
    brokers: dict[int, BrokerInfo | None] = {}
    topics: dict[str, TopicInfo | None] = {}
    apps: dict[str, AppInfo | None] = {}
    producers: dict[str, ProducerPolicyInfo | None] = {}
    """Producer policies by name."""
    consumers: dict[str, ConsumerPolicyInfo | None] = {}
    """Consumer policies by name."""
    checkpoint: Checkpoint | None = None
    """Set on the entry a full rebuild appends (it carries no entities)."""

    def __len__(self) -> int:
        return (
            len(self.brokers)
            + len(self.topics)
            + len(self.apps)
            + len(self.producers)
            + len(self.consumers)
        )

    def encode(self) -> bytes:
        """The delta's body as stored in the catalog log (its version is the entry id)."""
        return _ENCODER.encode(msgspec.structs.replace(self, version=0))

    @classmethod
    def decode(cls, data: bytes, version: int) -> CatalogDelta:
        """Inverse of :meth:`encode`, for the log entry numbered ``version``."""
        return msgspec.structs.replace(msgspec.msgpack.decode(data, type=cls), version=version)


class SnapshotWire(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A snapshot as stored in Redis (msgpack) or handed to Spark (JSON)."""

    version: int = 0
    brokers: list[BrokerInfo] = []
    topics: list[TopicInfo] = []
    apps: list[AppInfo] = []
    producers: list[ProducerPolicyInfo] = []
    consumers: list[ConsumerPolicyInfo] = []


def _keyed(items: Mapping[Any, V] | Iterable[V], key: str) -> Map:
    if isinstance(items, Map):
        return items
    if isinstance(items, Mapping):
        return Map(items)
    return Map({getattr(item, key): item for item in items})


# The stored form of the tokens seen last, so a client sending its token with every request
# (HTTP-MQ: one message per request) is not hashed every time; bounded, so tokens made up
# by a client only churn it.
_token_digest = functools.lru_cache(maxsize=4096)(hash_token)


class CatalogSnapshot:
    """Everything the engine and the protocol servers need from the catalog, at one version.

    Immutable: :meth:`apply` returns a new snapshot and leaves this one as it was.
    ``brokers``, ``topics`` and ``apps`` are read-only mappings keyed by id or code.
    """

    __slots__ = (
        "__weakref__",  # what servers remember a snapshot decided must not keep it alive
        "_apps_by_token_hash",
        "_consumer_pairs",
        "_consumers",
        "_consumers_by_topic",
        "_custom_dlqs",
        "_digest",
        "_producer_pairs",
        "_producers",
        "_zbus_names",
        "apps",
        "brokers",
        "topics",
        "version",
    )

    version: int
    brokers: Map
    topics: Map
    apps: Map

    def __init__(
        self,
        *,
        version: int = 0,
        brokers: Mapping[int, BrokerInfo] | Iterable[BrokerInfo] = (),
        topics: Mapping[str, TopicInfo] | Iterable[TopicInfo] = (),
        apps: Mapping[str, AppInfo] | Iterable[AppInfo] = (),
        producers: Mapping[str, ProducerPolicyInfo] | Iterable[ProducerPolicyInfo] = (),
        consumers: Mapping[str, ConsumerPolicyInfo] | Iterable[ConsumerPolicyInfo] = (),
    ) -> None:
        self.version = version
        self.brokers = _keyed(brokers, "id")
        self.topics = _keyed(topics, "code")
        self.apps = _keyed(apps, "code")
        self._producers = _keyed(producers, "name")
        self._consumers = _keyed(consumers, "name")
        self._producer_pairs = Map({(p.topic, p.app): p for p in self._producers.values()})
        self._consumer_pairs = Map({(c.topic, c.app): c for c in self._consumers.values()})
        by_topic: dict[str, list[ConsumerPolicyInfo]] = {}
        for c in self._consumers.values():
            by_topic.setdefault(c.topic, []).append(c)
        self._consumers_by_topic = Map(
            {t: tuple(sorted(cs, key=_name)) for t, cs in by_topic.items()}
        )
        self._apps_by_token_hash = Map(
            {h: app.code for app in self.apps.values() for h in _token_hashes(app)}
        )
        self._custom_dlqs = Map(
            {name: t.code for t in self.topics.values() for name in _named_dlq(t)}
        )
        self._zbus_names = Map({n: t.code for t in self.topics.values() for n in _zbus_name(t)})
        self._digest: int | None = None

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("version", "brokers", "topics", "apps") and hasattr(self, name):
            raise AttributeError(f"CatalogSnapshot is immutable: cannot set {name}")
        object.__setattr__(self, name, value)

    # -- lookups --------------------------------------------------------------------------

    @property
    def producers(self) -> tuple[ProducerPolicyInfo, ...]:
        """Every producer policy (O(n): for reports and tests, not request paths)."""
        return tuple(sorted(self._producers.values(), key=_name))

    @property
    def consumers(self) -> tuple[ConsumerPolicyInfo, ...]:
        """Every consumer policy (O(n): for reports and tests, not request paths)."""
        return tuple(sorted(self._consumers.values(), key=_name))

    def app_for_token(self, token: str | None) -> AppInfo | None:
        """The app whose active token is ``token``, or None — the one token lookup of
        every front-end. The token is looked up by its SHA-256 (what the catalog stores),
        so the secret is never compared byte by byte; the hash found is then confirmed
        with ``compare_digest``."""
        if not token:
            return None
        digest = _token_digest(token)
        code = self._apps_by_token_hash.get(digest)
        app = self.apps.get(code) if code is not None else None
        if app is None:
            return None
        ok = False
        for stored in app.token_hashes:
            ok |= hmac.compare_digest(digest, stored)
        return app if ok else None

    def dead_letter_queue_of(self, dlq: str) -> str | None:
        """The topic whose dead-letter queue was named ``dlq`` in its settings (not the
        default ``<code>.dlq``), if any."""
        return self._custom_dlqs.get(dlq)

    def zbus_topic(self, name: str) -> TopicInfo | None:
        """The topic a zbus client calls ``name``: the one of that code, else the one
        whose zbus MQ name it is (a name that is not a code: :attr:`TopicInfo.zbus_name`)."""
        topic = self.topics.get(name)
        if topic is None:
            code = self._zbus_names.get(name)
            topic = self.topics.get(code) if code is not None else None
        return topic

    def consumers_of(self, topic: str) -> tuple[ConsumerPolicyInfo, ...]:
        """Every consumer policy (consumer group) on ``topic``, by name."""
        return self._consumers_by_topic.get(topic, ())

    def producer(self, topic: str, app: str) -> ProducerPolicyInfo | None:
        """Return the producer policy of ``app`` on ``topic``, if any."""
        return self._producer_pairs.get((topic, app))

    def consumer(self, topic: str, app: str) -> ConsumerPolicyInfo | None:
        """Return the consumer policy of ``app`` on ``topic``, if any."""
        return self._consumer_pairs.get((topic, app))

    def producer_named(self, name: str) -> ProducerPolicyInfo | None:
        """Return the producer policy called ``name`` (HTTP-MQ addresses it so)."""
        return self._producers.get(name)

    def consumer_named(self, name: str) -> ConsumerPolicyInfo | None:
        """Return the consumer policy called ``name``."""
        return self._consumers.get(name)

    def counts(self) -> dict[str, int]:
        """How many entities of each kind the snapshot holds."""
        return {
            "brokers": len(self.brokers),
            "topics": len(self.topics),
            "apps": len(self.apps),
            "producers": len(self._producers),
            "consumers": len(self._consumers),
        }

    # -- digest ---------------------------------------------------------------------------

    @property
    def digest(self) -> int:
        """Sum of every entity's :func:`entity_hash`, modulo 2**64 (order-independent)."""
        if self._digest is None:
            total = 0
            for kind, entities in self._maps():
                for info in entities.values():
                    total += entity_hash(kind, info)
            self._digest = total & _MASK
        return self._digest

    def _maps(self) -> tuple[tuple[str, Map], ...]:
        return (
            ("brokers", self.brokers),
            ("topics", self.topics),
            ("apps", self.apps),
            ("producers", self._producers),
            ("consumers", self._consumers),
        )

    # -- change ---------------------------------------------------------------------------

    def apply(self, delta: CatalogDelta) -> CatalogSnapshot:
        """The snapshot at ``delta.version``: this one with the delta's entities replaced,
        added or removed. Costs O(size of the delta · log n); this snapshot is untouched."""
        new = object.__new__(CatalogSnapshot)
        digest = self._digest

        def replace(kind: str, current: Map, updates: Mapping[Any, Any]) -> Map:
            nonlocal digest
            if not updates:
                return current
            with current.mutate() as m:
                for key, info in updates.items():
                    old = m.get(key)
                    if old is not None:
                        if digest is not None:
                            digest -= entity_hash(kind, old)
                        del m[key]
                    if info is not None:
                        if digest is not None:
                            digest += entity_hash(kind, info)
                        m[key] = info
                return m.finish()

        object.__setattr__(new, "version", delta.version)
        object.__setattr__(new, "brokers", replace("brokers", self.brokers, delta.brokers))
        new._custom_dlqs = _reindex_codes(self._custom_dlqs, self.topics, delta.topics, _named_dlq)
        new._zbus_names = _reindex_codes(self._zbus_names, self.topics, delta.topics, _zbus_name)
        object.__setattr__(new, "topics", replace("topics", self.topics, delta.topics))
        new._apps_by_token_hash = _reindex_codes(
            self._apps_by_token_hash, self.apps, delta.apps, _token_hashes
        )
        object.__setattr__(new, "apps", replace("apps", self.apps, delta.apps))
        new._producer_pairs = _reindex_pairs(self._producers, self._producer_pairs, delta.producers)
        new._producers = replace("producers", self._producers, delta.producers)
        new._consumer_pairs = _reindex_pairs(self._consumers, self._consumer_pairs, delta.consumers)
        new._consumers_by_topic = self._reindex_topics(delta.consumers)
        new._consumers = replace("consumers", self._consumers, delta.consumers)
        new._digest = None if digest is None else digest & _MASK
        return new

    def _reindex_topics(self, consumers: Mapping[str, ConsumerPolicyInfo | None]) -> Map:
        if not consumers:
            return self._consumers_by_topic
        touched: dict[str, dict[str, ConsumerPolicyInfo]] = {}

        def group(topic: str) -> dict[str, ConsumerPolicyInfo]:
            if topic not in touched:
                touched[topic] = {c.name: c for c in self._consumers_by_topic.get(topic, ())}
            return touched[topic]

        for name, info in consumers.items():
            old = self._consumers.get(name)
            if old is not None:
                group(old.topic).pop(name, None)
            if info is not None:
                group(info.topic)[name] = info
        with self._consumers_by_topic.mutate() as m:
            for topic, members in touched.items():
                if members:
                    m[topic] = tuple(sorted(members.values(), key=_name))
                elif topic in m:
                    del m[topic]
            return m.finish()

    def replace(self, **fields: Any) -> CatalogSnapshot:
        """A copy with some of the constructor's fields replaced (O(n): for tools and
        tests; catalog changes go through :meth:`apply`)."""
        current: dict[str, Any] = {
            "version": self.version,
            "brokers": self.brokers,
            "topics": self.topics,
            "apps": self.apps,
            "producers": self._producers,
            "consumers": self._consumers,
        }
        current.update(fields)
        return CatalogSnapshot(**current)

    # -- equality and transport -----------------------------------------------------------

    def same_catalog(self, other: CatalogSnapshot) -> bool:
        """Whether both hold the same entities, whatever their versions."""
        return all(a == b for (_, a), (_, b) in zip(self._maps(), other._maps(), strict=True))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CatalogSnapshot):
            return NotImplemented
        return self.version == other.version and self.same_catalog(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts().items())
        return f"<CatalogSnapshot v{self.version} {counts}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_from_wire, (self.to_wire(),))

    def to_wire(self) -> SnapshotWire:
        """The snapshot as plain lists, for msgpack or JSON."""
        return SnapshotWire(
            version=self.version,
            brokers=list(self.brokers.values()),
            topics=list(self.topics.values()),
            apps=list(self.apps.values()),
            producers=list(self._producers.values()),
            consumers=list(self._consumers.values()),
        )

    @classmethod
    def from_wire(cls, wire: SnapshotWire) -> CatalogSnapshot:
        """Inverse of :meth:`to_wire`."""
        return _from_wire(wire)

    def encode(self) -> bytes:
        """Serialise for storage in Redis (msgpack)."""
        return _ENCODER.encode(self.to_wire())

    @classmethod
    def decode(cls, data: bytes) -> CatalogSnapshot:
        """Inverse of :meth:`encode`."""
        return _from_wire(msgspec.msgpack.decode(data, type=SnapshotWire))

    def encode_json(self) -> bytes:
        """Serialise as JSON (how the pipeline hands the catalog to Spark)."""
        return msgspec.json.encode(self.to_wire())

    @classmethod
    def decode_json(cls, data: bytes | str) -> CatalogSnapshot:
        """Inverse of :meth:`encode_json` (msgspec.ValidationError when malformed)."""
        return _from_wire(msgspec.json.decode(data, type=SnapshotWire))


def _name(policy: ProducerPolicyInfo | ConsumerPolicyInfo) -> str:
    return policy.name


def _from_wire(wire: SnapshotWire) -> CatalogSnapshot:
    return CatalogSnapshot(
        version=wire.version,
        brokers=wire.brokers,
        topics=wire.topics,
        apps=wire.apps,
        producers=wire.producers,
        consumers=wire.consumers,
    )


def _token_hashes(app: AppInfo) -> Iterable[str]:
    return app.token_hashes


def _named_dlq(topic: TopicInfo) -> Iterable[str]:
    """The dead-letter queue name ``topic``'s settings give (none: ``<code>.dlq``)."""
    return (topic.queue.dead_letter_queue,) if topic.queue.dead_letter_queue else ()


def _zbus_name(topic: TopicInfo) -> Iterable[str]:
    """The zbus MQ name ``topic`` has besides its code, if any."""
    return (topic.zbus_name,) if topic.zbus_name else ()


def _reindex_codes(
    index: Map, entities: Map, updates: Mapping[str, Any], keys_of: Callable[[Any], Iterable[str]]
) -> Map:
    """A reverse index (key → entity code, each entity's keys ``keys_of(entity)``) after
    ``updates`` replaced, added or removed (None) entities of ``entities``: the old keys
    of each go (those still pointing at it), its new ones come. O(size of the update)."""
    if not updates:
        return index
    with index.mutate() as m:
        for code, info in updates.items():
            old = entities.get(code)
            for key in keys_of(old) if old is not None else ():
                if m.get(key) == code:
                    del m[key]
            for key in keys_of(info) if info is not None else ():
                m[key] = code
        return m.finish()


def _reindex_pairs(by_name: Map, pairs: Map, updates: Mapping[str, Any]) -> Map:
    if not updates:
        return pairs
    with pairs.mutate() as m:
        for name, info in updates.items():
            old = by_name.get(name)
            if old is not None and (pair := (old.topic, old.app)) in m and m[pair].name == name:
                del m[pair]
            if info is not None:
                m[(info.topic, info.app)] = info
        return m.finish()
