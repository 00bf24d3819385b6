"""The engine's shared state and the helpers every section uses: the catalog, topics and
policies, partitions this broker serves, and dead-lettering to a topic's DLQ.

A section of the :class:`~brokers.engine.engine.Engine` facade (a mixin on its shared state).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

from brokers.engine import offsets as offsets_mod
from brokers.engine.access import (
    Gate,
    dead_letter_parent,
    dead_letter_queue,
    foreign_dead_letter_queue,
    is_dead_letter_queue,
)
from brokers.engine.append import append_records, choose_partition
from brokers.engine.catalog import (
    CatalogSnapshot,
    ConsumerPolicyInfo,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    QueueSettings,
    TopicInfo,
)
from brokers.engine.counters import Counters
from brokers.engine.errors import (
    AccessDenied,
    ClientIdNotAllowed,
    ClientIdRequired,
    ConsumerNotFound,
    InvalidMessage,
    MessageTooLarge,
    PartitionNotFound,
    QueueFull,
    RateLimited,
    TopicNotFound,
)
from brokers.engine.fetch import Fetcher
from brokers.engine.groups import members as group_members
from brokers.engine.groups import members_of_groups
from brokers.engine.holders import Holders
from brokers.engine.joined_appends import AppendJoiner
from brokers.engine.kept_settles import KeptSettles
from brokers.engine.model import (
    Delivery,
    QoS,
)
from brokers.engine.notify import Notifier
from brokers.engine.priority import band_of, is_prioritized
from brokers.engine.produce_latency import ProduceLatencies
from brokers.engine.record import (
    Message,
    decode_record,
    encode_record,
)
from brokers.engine.redisio import AnyRedis, Durability
from brokers.engine.retry import RetryPolicy, RetryStore, retry_stores
from brokers.engine.retry_presence import RetryPresence
from brokers.engine.shared import FAN_OUT, QueueRetry, SharedDelivery
from brokers.engine.turns import PartitionTurns
from brokers.engine.wire import WireBlob, WireRecords

DEFAULT_RETRY = RetryPolicy()
ACTIVE_CLIENT_MS = 600_000
"""A broadcast client seen within this many milliseconds is active: its lag counts (see
:meth:`PullSection.client_lags`), and so do the messages retention takes before it
read them (:meth:`LogSection.trim`)."""


def refusal_kind(exc: BaseException) -> str | None:
    """Why a produce was refused, when the producer can change it (one of
    :data:`~brokers.engine.counters.REFUSALS`); None for what is not its business (an
    unknown topic, a store or broker problem)."""
    if isinstance(exc, RateLimited):
        return "rate_limited"
    if isinstance(exc, MessageTooLarge):
        return "too_large"
    if isinstance(exc, InvalidMessage):
        return "invalid"
    if isinstance(exc, AccessDenied):
        return "not_allowed"
    if isinstance(exc, QueueFull):
        return "queue_full"
    return None


def how_many(messages: Sequence[Message | bytes] | WireRecords | WireBlob) -> int:
    """How many messages (records) a produce call was given."""
    if isinstance(messages, WireRecords):
        return len(messages.counts)
    if isinstance(messages, WireBlob):
        return messages.count
    return len(messages)


class EngineBase:
    """State the sections share (set by :class:`~brokers.engine.engine.Engine`)."""

    redis: AnyRedis
    broker_id: int | None
    max_body: int
    retry_policy: RetryPolicy
    force_ack: bool
    queue_retry: QueueRetry
    durability: Durability
    notifier: Notifier
    counters: Counters
    produce_latencies: ProduceLatencies
    gate: Gate
    shared: SharedDelivery
    holders: Holders
    kept_settles: KeptSettles
    _expire_due: dict[str, tuple[tuple[str | None, ...], int]]
    _catalog: Callable[[], CatalogSnapshot]
    _clock: Callable[[], float]
    _rng: random.Random
    _turns: PartitionTurns
    _next_guess: dict[tuple[str, int], int]
    _next_seen: dict[tuple[str, int], int]
    _joiner: AppendJoiner
    _fetcher: Fetcher
    retry_presence: RetryPresence

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    @property
    def catalog(self) -> CatalogSnapshot:
        return self._catalog()

    def topic(self, code: str) -> TopicInfo:
        """The topic from the current snapshot, or TopicNotFound."""
        info = self._catalog().topics.get(code)
        if info is None:
            raise TopicNotFound(f"topic {code} does not exist")
        return info

    def _choose_partition(
        self,
        snap: CatalogSnapshot,
        info: TopicInfo,
        policy: ProducerPolicyInfo | None,
        app: str,
        partition: int | None,
        head: Message | bytes | None,
        business_id: str,
    ) -> int:
        """The partition an append of ``app``'s messages goes to: ``partition`` when
        given, else a prioritized topic's band of ``head`` (the first message, or the
        wire records), else by :func:`~brokers.engine.append.choose_partition` (the
        businessId's hash on a sequential topic, the producer's turn otherwise)."""
        if (partition is None or partition < 0) and is_prioritized(info):
            partition = band_of(info, head)  # type: ignore[arg-type]
        return choose_partition(
            snap,
            info,
            policy,
            partition=partition,
            business_id=business_id,
            turns=self._turns,
            app=app,
        )

    def _partition(self, topic: TopicInfo, partition: int) -> None:
        if not 0 <= partition < topic.partitions:
            raise PartitionNotFound(f"{topic.code} has no partition {partition}")

    def _refused(self, topic: str, app: str, exc: BaseException, count: int = 1) -> None:
        """Count ``count`` messages of ``app`` the engine refused on ``topic`` with
        ``exc``, when it is the producer's business (:func:`refusal_kind`)."""
        kind = refusal_kind(exc)
        if kind is not None:
            self.counters.refused(topic=topic, app=app, kind=kind, count=count)

    def _consumer(self, topic: str, app: str) -> ConsumerPolicyInfo:
        policy = self._catalog().consumer(topic, app)
        if policy is None:
            raise ConsumerNotFound(f"{app} does not consume {topic}")
        return policy

    def _retries_of(self, topic: str, app: str, member: str | None = None) -> RetryStore:
        """The retry store of a consumer group (or of one broadcast client of it,
        ``member``), telling this process's :attr:`retry_presence` of what it adds or
        makes due."""
        return RetryStore(self.redis, topic, app, self.retry_presence.forget, member=member)

    def _retry_stores(self, topic: str, app: str, member: str | None) -> list[RetryStore]:
        """:func:`~brokers.engine.retry.retry_stores`, telling :attr:`retry_presence`."""
        return retry_stores(self.redis, topic, app, member, self.retry_presence.forget)

    async def _settle_retry_ids(
        self,
        topic: str,
        app: str,
        member: str | None,
        ids: Sequence[int],
        *,
        ok: bool,
        now_ms: int,
        policy: RetryPolicy,
        reason: str = "MaxRetriesExceeded",
    ) -> tuple[int, int]:
        """Settle retry ids in whichever of the consumer's stores each is (acked, or a
        failed attempt), forgotten by this process's lease record: (found, dead-lettered)."""
        done = dead = 0
        for store in self._retry_stores(topic, app, member):
            found, died = await store.settle(
                ids, ok=ok, now_ms=now_ms, policy=policy, reason=reason, holder=self.holders.id
            )
            done, dead = done + found, dead + died
        return done, dead

    async def _release_held_retries(
        self, topic: str, app: str, member: str | None, holder: str, ids: Sequence[int] = ()
    ) -> int:
        """The consumer's retries ``holder`` still holds leased (all, or those of ``ids``)
        are due at once; how many (:meth:`RetryStore.release_held`)."""
        due = 0
        for store in self._retry_stores(topic, app, member):
            due += await store.release_held(holder, now_ms=self.now_ms(), ids=ids)
        return due

    def _retry_for(self, policy: ConsumerPolicyInfo) -> RetryPolicy:
        base = self.retry_policy
        return RetryPolicy(base.base_ms, base.cap_ms, policy.err_times, base.max_age_ms)

    @staticmethod
    def _by_broadcast(topic: TopicInfo, policy: ConsumerPolicyInfo) -> bool:
        """Whether ``policy`` consumes ``topic`` by broadcast: each client its own
        progress, named by the clientId it fetches with."""
        return policy.broadcast or topic.type == "broadcast"

    @classmethod
    def _by_members(cls, topic: TopicInfo, policy: ConsumerPolicyInfo) -> bool:
        """Whether ``policy``'s clients on ``topic`` are the members of a fan-out queue
        (each its own progress, joined by a push subscriber), not a broadcast consumer's
        clients."""
        return topic.queue.delivery_mode in FAN_OUT and not cls._by_broadcast(topic, policy)

    def _broadcast(
        self, topic: TopicInfo, policy: ConsumerPolicyInfo, client_id: str | None
    ) -> None:
        if self._by_broadcast(topic, policy):
            if not client_id:
                raise ClientIdRequired(f"{policy.name} consumes by broadcast: clientId required")
        elif client_id:
            raise ClientIdNotAllowed(f"{policy.name} consumes by clustering: no clientId")

    async def _progress_clients(
        self, known: Sequence[tuple[str, str, TopicInfo]]
    ) -> dict[tuple[str, str], list[str]]:
        """The clients whose progress stands for each consumer group ``(topic, app,
        topic's info)``: a broadcast consumer's clients seen in the last
        ``ACTIVE_CLIENT_MS`` (every registered one when none was,
        :func:`offsets.lag_clients`), a fan-out queue's members. Groups consuming as one
        are left out (their progress is the group's own). One round trip for the
        broadcast consumers, two for the fan-out queues, none without."""
        policies = {(t, a): self.catalog.consumer(t, a) for t, a, _ in known}
        broadcast = [
            (t, a)
            for t, a, info in known
            if (policy := policies[(t, a)]) is not None and self._by_broadcast(info, policy)
        ]
        fan_out = [
            (t, a)
            for t, a, info in known
            if (policy := policies[(t, a)]) is not None and self._by_members(info, policy)
        ]
        since = self.now_ms() - ACTIVE_CLIENT_MS
        return {
            **dict(
                zip(
                    broadcast,
                    await offsets_mod.lag_clients(self.redis, broadcast, since),
                    strict=True,
                )
            ),
            **dict(zip(fan_out, await members_of_groups(self.redis, fan_out), strict=True)),
        }

    async def _each_client(
        self,
        info: TopicInfo,
        policy: ConsumerPolicyInfo,
        client_id: str | None,
        *,
        group_too: bool = True,
    ) -> list[str | None]:
        """Whose progress an operation on the consumer moves: ``client_id`` — for a
        broadcast consumer without one, every registered client (one idle past
        the retention is forgotten: :meth:`forget_idle_clients`); on a fan-out
        queue, each member and (``group_too``, or while there is no member) the group,
        which its pull consumers read."""
        if client_id is None:
            if self._by_broadcast(info, policy):
                return list(await offsets_mod.clients(self.redis, info.code, policy.app, None))
            if self._by_members(info, policy):
                members: list[str | None] = list(
                    await group_members(self.redis, info.code, policy.app)
                )
                return [None, *members] if group_too or not members else members
        return [client_id]

    def readable_partitions(self, topic: TopicInfo) -> tuple[int, ...]:
        """This broker's partitions of ``topic`` (all of them without a broker id)."""
        if self.broker_id is None or not topic.groups:
            return tuple(range(topic.partitions))
        return topic.partitions_led_by(self.broker_id)

    def group_topic(self, code: str) -> TopicInfo:
        """The topic, or the implicit dead-letter queue ``<queue>.dlq`` of a queue topic
        that has its DLQ on but no topic of that name (one partition, led like the
        queue's partition 0, governed by the queue's policies)."""
        info = self._catalog().topics.get(code)
        if info is not None:
            return info
        parent = dead_letter_parent(self._catalog(), code)
        if parent is None:
            raise TopicNotFound(f"topic {code} does not exist")
        leader = parent.leader_of(0)
        groups = (
            ()
            if leader is None
            else (PartitionGroupInfo(group_id=0, leader=leader, partitions=(0,)),)
        )
        return TopicInfo(
            code=code,
            partitions=1,
            groups=groups,
            team=parent.team,
            anonymous_app=parent.anonymous_app,
            queue=QueueSettings(max_queue_size=None),
        )

    def _group_ids(self, info: TopicInfo) -> list[str]:
        """The clustering consumer groups of ``info``: their backlog bounds the topic (a
        broadcast topic or fan-out queue has none: what no member was handed counts)."""
        if info.type == "broadcast" or info.queue.delivery_mode in FAN_OUT:
            return []
        return [c.app for c in self._catalog().consumers_of(info.code) if not c.broadcast]

    async def dead_letter(
        self, topic: str, app: str, delivery: Delivery, reason: str, attempts: int = 0
    ) -> None:
        """Dead-letter ``delivery``: to the topic's dead-letter queue when it has one, else
        to the dead-letter queue of ``app``'s group (listed and resent from the console)."""
        if not await self._dead_letter(topic, app, delivery, reason, attempts):
            await self._retries_of(topic, app).dead_letter(
                [(delivery.partition, delivery.index, delivery.count, delivery.record)],
                now_ms=self.now_ms(),
                reason=reason,
                attempts=attempts,
            )

    async def _dead_letter(
        self, topic: str, app: str, delivery: Delivery, reason: str, attempts: int
    ) -> bool:
        """Copy a dead message to the topic's dead-letter queue when it has one (not when
        that name is another team's topic: :func:`foreign_dead_letter_queue`)."""
        info = self.group_topic(topic)
        settings = info.queue
        snapshot = self._catalog()
        if (
            not settings.dead_letter_enabled
            or is_dead_letter_queue(snapshot, topic)
            or foreign_dead_letter_queue(snapshot, info)
        ):
            return False
        await self._to_topic_dlq(topic, app, delivery.record, reason=reason, attempts=attempts)
        return True

    async def _to_topic_dlq(
        self,
        topic: str,
        app: str,
        record: bytes,
        *,
        reason: str,
        attempts: int,
        qos: QoS = QoS.RECEIVED,
    ) -> None:
        """Append ``record`` to the topic's dead-letter queue (:func:`dead_letter_queue`)
        with the VibeMQ dead-letter properties."""
        stored = decode_record(record)
        attributes = dict(stored.attributes)
        attributes.update(
            deadLetterReason=reason,
            originalQueue=topic,
            deadLetteredAt=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now_ms() / 1000)),
            deliveryAttempts=str(attempts),
        )
        msg = Message(
            stored.body,
            business_id=stored.business_id,
            attributes=attributes,
            priority=stored.priority,
            send_time_ms=stored.send_time_ms,
            flag=stored.flag,
            sys_code=stored.sys_code & ~0x1000,
            extension=stored.extension,
        )
        dlq = dead_letter_queue(self.group_topic(topic))
        new, count = encode_record(msg, app=stored.app or app, partition=0, now_ms=self.now_ms())
        await append_records(self.redis, self.durability, dlq, 0, [(new, count)], qos)
