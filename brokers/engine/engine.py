"""The engine facade: the one API every protocol server, the proxy, the console and the
pipeline call. It resolves the catalog snapshot, asks the gate (:mod:`.access`) whether
the app may produce or consume — every produce and consume method takes the app and the
client address — and delegates each operation to its module.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from brokers.engine import ack as ack_mod
from brokers.engine import offsets as offsets_mod
from brokers.engine import overview
from brokers.engine import resend as resend_mod
from brokers.engine.access import Gate
from brokers.engine.append import append_blob, choose_partition, pack_records
from brokers.engine.catalog import CatalogSnapshot, ConsumerPolicyInfo, QueueSettings, TopicInfo
from brokers.engine.consume import release
from brokers.engine.copies import Claim, FanoutCopies
from brokers.engine.counters import Counters, MinuteTraffic
from brokers.engine.delay import MAX_DELAY_MS, DelayStore, Held, topics_with_delays
from brokers.engine.errors import (
    AckRejected,
    ClientIdNotAllowed,
    ClientIdRequired,
    ConsumerClientNotAllowed,
    ConsumerNotFound,
    ConsumerPaused,
    EngineError,
    IndexOutOfRange,
    InvalidMessage,
    PartitionNotFound,
    RateLimited,
    StoreUnavailable,
    TopicNotFound,
)
from brokers.engine.fetch import Fetcher, FetchRequest
from brokers.engine.keys import RETRY_PARTITION, GroupKeys, PartitionKeys, consumer_id
from brokers.engine.model import (
    AckResult,
    AckStatus,
    AppendResult,
    CommitResult,
    Delivery,
    FetchResult,
    FetchStatus,
    PartitionProgress,
    QoS,
    RetryRecord,
    RetryType,
    StoredEntry,
    TransactionInfo,
)
from brokers.engine.notify import Notifier
from brokers.engine.overview import GroupLag, TopicRate
from brokers.engine.queues import QueueRetry, Queues, QueueStats
from brokers.engine.ratelimit import RateLimiter
from brokers.engine.read import bounds, index_at_time, read_entries, read_range
from brokers.engine.record import (
    DEFAULT_MAX_BODY,
    Message,
    RecordEncoder,
    decode_record,
    encode_record,
)
from brokers.engine.redisio import AnyRedis, Durability
from brokers.engine.retention import trim_partition
from brokers.engine.retry import RetryPolicy, RetryStore
from brokers.engine.transactions import Transactions
from brokers.engine.wire import WireBlob, WireRecords, check_wire, stamp_wire, wire_records

DEFAULT_RETRY = RetryPolicy()
DEFAULT_QUEUE_RETRY = QueueRetry()
REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


def contiguous(indexes: Sequence[int]) -> tuple[int, int]:
    """``[start, end)`` of a contiguous run of distinct indexes; AckRejected otherwise."""
    if isinstance(indexes, range):
        if indexes.step != 1 or len(indexes) == 0:
            raise AckRejected("acked indexes must be a non-empty contiguous run")
        return indexes.start, indexes.stop
    if not indexes:
        raise AckRejected("no indexes to ack")
    lo, hi = min(indexes), max(indexes)
    if hi - lo + 1 != len(indexes) or len(set(indexes)) != len(indexes):
        raise AckRejected("acked indexes are not contiguous or have duplicates")
    return lo, hi + 1


class Engine:
    """asyncio message engine on redis.asyncio (single Redis or RedisCluster).

    ``catalog`` returns the current :class:`CatalogSnapshot` (a CatalogWatcher's
    ``current``); ``broker_id`` limits fetches to the partitions this broker leads;
    ``clock`` (seconds) stamps messages and drives lock expiry (tests pass a fake one).
    """

    def __init__(
        self,
        redis: AnyRedis,
        catalog: Callable[[], CatalogSnapshot],
        *,
        broker_id: int | None = None,
        clock: Callable[[], float] = time.time,
        max_body: int = DEFAULT_MAX_BODY,
        retry_policy: RetryPolicy = DEFAULT_RETRY,
        force_ack: bool = False,
        durability_timeout_ms: int = 5_000,
        replicas: int = 1,
        rng: random.Random | None = None,
        queue_retry: QueueRetry = DEFAULT_QUEUE_RETRY,
    ) -> None:
        self.redis = redis
        self.queue_retry = queue_retry
        self._catalog = catalog
        self.broker_id = broker_id
        self._clock = clock
        self.max_body = max_body
        self.retry_policy = retry_policy
        self.force_ack = force_ack
        self._rng = rng or random.Random()
        self.durability = Durability(redis, timeout_ms=durability_timeout_ms, replicas=replicas)
        self.notifier = Notifier(redis)
        self.counters = Counters(redis, clock)
        self.gate = Gate(catalog, RateLimiter(redis), self.now_ms)
        self._next_guess: dict[tuple[str, int], int] = {}
        self._fetcher = Fetcher(redis, self.notifier, self.now_ms, self._retry_for, self._rng)

    # ------------------------------------------------------------------ basics

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    @property
    def catalog(self) -> CatalogSnapshot:
        return self._catalog()

    async def close(self) -> None:
        """Flush counters and stop the notification listener."""
        await self.counters.close()
        await self.notifier.close()

    def topic(self, code: str) -> TopicInfo:
        """The topic from the current snapshot, or TopicNotFound."""
        info = self._catalog().topics.get(code)
        if info is None:
            raise TopicNotFound(f"topic {code} does not exist")
        return info

    def _partition(self, topic: TopicInfo, partition: int) -> None:
        if not 0 <= partition < topic.partitions:
            raise PartitionNotFound(f"{topic.code} has no partition {partition}")

    def _consumer(self, topic: str, app: str) -> ConsumerPolicyInfo:
        policy = self._catalog().consumer(topic, app)
        if policy is None:
            raise ConsumerNotFound(f"{app} does not consume {topic}")
        return policy

    def _retry_for(self, policy: ConsumerPolicyInfo) -> RetryPolicy:
        base = self.retry_policy
        return RetryPolicy(base.base_ms, base.cap_ms, policy.err_times, base.max_age_ms)

    def _broadcast(
        self, topic: TopicInfo, policy: ConsumerPolicyInfo, client_id: str | None
    ) -> None:
        if policy.broadcast or topic.type == "broadcast":
            if not client_id:
                raise ClientIdRequired(f"{policy.name} consumes by broadcast: clientId required")
        elif client_id:
            raise ClientIdNotAllowed(f"{policy.name} consumes by clustering: no clientId")

    def readable_partitions(self, topic: TopicInfo) -> tuple[int, ...]:
        """This broker's partitions of ``topic`` (all of them without a broker id)."""
        if self.broker_id is None or not topic.groups:
            return tuple(range(topic.partitions))
        return topic.partitions_led_by(self.broker_id)

    # ------------------------------------------------------------------ produce

    async def append(
        self,
        topic: str,
        app: str,
        messages: Sequence[Message | bytes] | WireRecords | WireBlob,
        *,
        partition: int | None = None,
        qos: QoS = QoS.RECEIVED,
        client_address: str | None = None,
    ) -> AppendResult:
        """Append messages to one partition: Message objects, JMQ4 BrokerMessage bytes,
        :class:`WireRecords` (from :meth:`check_wire`, the messages as one checked blob) or a
        :class:`WireBlob` (records as received, checked and stamped here in one walk).

        The gate checks ``app``'s producer policy first (policy, blacklisted
        ``client_address``, rate limit for every message of the call, all or none). The
        call is atomic; it returns once Redis accepted the write with the ``qos``
        durability. ``partition`` None/-1 lets the engine choose (see append.py).
        """
        if not messages:
            raise InvalidMessage("no messages")
        policy = self.gate.producer(topic, app, client_address)
        return await self._append(
            topic,
            app,
            messages,
            partition=partition,
            qos=qos,
            client_address=client_address,
            rate_limited=policy.rate_limit is not None,
        )

    async def _append(
        self,
        topic: str,
        app: str,
        messages: Sequence[Message | bytes] | WireRecords | WireBlob,
        *,
        partition: int | None,
        qos: QoS,
        client_address: str | None,
        rate_limited: bool = False,
    ) -> AppendResult:
        """:meth:`append` past the gate's policy check (a delayed message is appended
        so when due: it was checked when it was accepted). ``rate_limited``: take the
        producer's permits for the messages before storing them."""
        snap = self._catalog()
        info = self.topic(topic)
        policy = snap.producer(topic, app)
        first = None if isinstance(messages, WireRecords | WireBlob) else messages[0]
        business_id = first.business_id if isinstance(first, Message) else ""
        chosen = choose_partition(
            snap, info, policy, partition=partition, business_id=business_id, rng=self._rng
        )
        now = self.now_ms()
        slot = (topic, chosen)
        guess = self._next_guess.get(slot, -1)
        counts: Sequence[int]
        if isinstance(messages, WireBlob):
            blob, counts, total = stamp_wire(
                messages,
                self.max_body,
                partition=chosen,
                now_ms=now,
                client_address=client_address,
                first=max(0, guess),
            )
        elif (wire := self._wire(messages)) is not None:
            blob = wire.stamp(
                partition=chosen, now_ms=now, client_address=client_address, first=max(0, guess)
            )
            counts = wire.counts
            total = wire.total
        else:
            records = self._encode(messages, app, chosen, now, client_address)  # type: ignore[arg-type]
            blob = pack_records(records, max(0, guess))
            counts = [count for _, count in records]
            total = sum(counts)
        if rate_limited and policy is not None:
            await self.gate.admit_produce(policy, total)
        first_index = await append_blob(
            self.redis, self.durability, topic, chosen, blob, total, qos, expected_first=guess
        )
        end = first_index + total
        if total == len(counts):
            indexes = tuple(range(first_index, end))
        else:
            indexes, pos = [], first_index
            for count in counts:
                indexes.append(pos)
                pos += count
        self._next_guess[slot] = end
        self.counters.record(
            topic=topic, app=app, broker=self.broker_id, produced=total, produced_bytes=len(blob)
        )
        return AppendResult(topic, chosen, first_index, tuple(indexes), total, now)

    async def append_many(
        self,
        topic: str,
        app: str,
        messages: Sequence[Message],
        *,
        partition: int | None = None,
        qos: QoS = QoS.RECEIVED,
        client_address: str | None = None,
    ) -> list[AppendResult | EngineError]:
        """Append independent messages (a connection's pipelined produces) in order, with
        one Redis call when all are valid: one entry per message, its AppendResult or the
        error it alone met — an invalid message, or RateLimited past the permits the
        producer's rate limit gave (each message costs one, as if sent alone). The gate
        refuses the whole call for an app without a producer policy or a blacklisted
        ``client_address``."""
        if not messages:
            return []
        policy = self.gate.producer(topic, app, client_address)
        admitted = len(messages)
        if policy.rate_limit:
            admitted = await self.gate.admit_produce_up_to(policy, len(messages))
        out: list[AppendResult | EngineError] = []
        args = {"partition": partition, "qos": qos, "client_address": client_address}
        try:
            stored = await self._append(topic, app, messages[:admitted], **args)
            out.extend(
                AppendResult(topic, stored.partition, i, (i,), 1, stored.store_time_ms)
                for i in stored.indexes
            )
        except InvalidMessage:  # find the bad ones: the others are stored one by one
            for message in messages[:admitted]:
                try:
                    out.append(await self._append(topic, app, [message], **args))
                except InvalidMessage as exc:
                    out.append(exc)
        refused = RateLimited(f"producer {policy.name} is over its {policy.rate_limit}/s limit")
        out.extend(refused for _ in messages[admitted:])
        return out

    def check_wire(self, blob: bytes, count: int) -> WireRecords:
        """Check ``count`` JMQ4 BrokerMessage records filling ``blob`` for :meth:`append` /
        :meth:`append_to_transaction` (InvalidMessage, MessageTooLarge over ``max_body``)."""
        return check_wire(blob, count, self.max_body)

    def _wire(self, messages: Sequence[Message | bytes] | WireRecords) -> WireRecords | None:
        """The messages as checked wire records, or None for a list with Message objects."""
        if isinstance(messages, WireRecords):
            return messages
        if all(isinstance(m, bytes | bytearray | memoryview) for m in messages):
            return wire_records([bytes(m) for m in messages], self.max_body)  # type: ignore[arg-type]
        return None

    def _encode(
        self,
        messages: Sequence[Message | bytes],
        app: str,
        partition: int,
        now: int,
        client_address: str | None,
    ) -> list[tuple[bytes, int]]:
        out = []
        encoder = RecordEncoder(
            app=app,
            partition=partition,
            now_ms=now,
            client_address=client_address,
            max_body=self.max_body,
        )
        for msg in messages:
            if isinstance(msg, Message):
                out.append(encoder.encode(msg))
            else:  # a JMQ4 record among Message objects
                wire = wire_records([bytes(msg)], self.max_body)
                stamped = wire.stamp(partition=partition, now_ms=now, client_address=client_address)
                out.append((stamped, wire.counts[0]))
        return out

    # ------------------------------------------------------------------ read

    async def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(min index, max index) of a partition; max is the next index to be written."""
        self._partition(self.topic(topic), partition)
        return await bounds(self.redis, topic, partition)

    async def read(self, topic: str, partition: int, start: int, count: int = 32) -> list[Delivery]:
        """Records from ``start`` (at least ``count`` items unless the end comes first).

        ``start == max`` gives an empty list; outside ``[min, max]`` raises IndexOutOfRange.
        """
        self._partition(self.topic(topic), partition)
        return await read_range(self.redis, topic, partition, start, count)

    async def read_entries(
        self, topic: str, partition: int, start: int, count: int = 4096
    ) -> list[StoredEntry]:
        """Whole stored appends from the one holding ``start`` (at least ``count`` indexes
        unless the end comes first), for bulk readers that split records themselves: one
        Redis reply element per append instead of one per message. Same bounds rules as
        :meth:`read`."""
        self._partition(self.topic(topic), partition)
        return await read_entries(self.redis, topic, partition, start, count)

    async def index_at_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """First index stored at or after ``timestamp_ms`` (the max index if none)."""
        self._partition(self.topic(topic), partition)
        return await index_at_time(self.redis, topic, partition, timestamp_ms)

    # ------------------------------------------------------------------ access

    def authorize_producer(self, topic: str, app: str, address: str | None = None) -> None:
        """Refuse (AccessDenied, TopicNotFound) unless ``app`` may produce to ``topic``
        from ``address`` (None: the address is not checked, as for a registration).
        Every produce method checks this itself; front-ends call it to refuse early."""
        self.gate.producer(topic, app, address)

    def authorize_consumer(self, topic: str, app: str, address: str | None = None) -> bool:
        """Refuse (AccessDenied, TopicNotFound) unless ``app`` may consume ``topic`` from
        ``address``; False while the consumer is paused (it may subscribe, and gets
        nothing until it is resumed). Every consume method checks this itself."""
        return not self.gate.consumer(topic, app, address).paused

    def is_broadcast(self, topic: str, app: str) -> bool:
        """Whether ``app`` consumes ``topic`` by broadcast (each client its own progress)."""
        info = self.topic(topic)
        policy = self._consumer(topic, app)
        return policy.broadcast or info.type == "broadcast"

    def app_for_token(self, token: str | None) -> str | None:
        """The app whose active token ``token`` is (the catalog's one lookup), or None."""
        app = self._catalog().app_for_token(token)
        return app.code if app is not None else None

    # ------------------------------------------------------------------ consume

    async def consume_read(
        self,
        topic: str,
        app: str,
        partition: int,
        start: int,
        count: int = 32,
        *,
        address: str | None = None,
    ) -> list[Delivery]:
        """:meth:`read` for a consumer of ``app`` that keeps its own position (JMQ4
        FETCH_PARTITION_MESSAGE, zbus pub/sub): past the gate (no policy or a blacklisted
        ``address``: refused; paused: ConsumerPaused; over the rate limit: RateLimited,
        and at most as many records as there are permits)."""
        policy = self.gate.consumer(topic, app, address)
        if policy.paused:
            raise ConsumerPaused(f"consumer {policy.name} is paused")
        self._partition(self.topic(topic), partition)
        granted = await self.gate.admit_consume(policy, max(1, count))
        got = await read_range(self.redis, topic, partition, start, granted)
        if policy.rate_limit:
            got = got[:granted]
            await self.gate.refund_consume(policy, granted - len(got))
        return got

    async def fetch(
        self,
        topic: str,
        app: str,
        *,
        count: int = 0,
        ack_timeout_ms: int = 0,
        long_poll_ms: int = 0,
        owner: str = "",
        client_id: str | None = None,
        address: str = "",
        start_position: str | None = None,
        reported_address: str | None = None,
    ) -> FetchResult:
        """Lock a partition and read from its ack index (JMQ4 FETCH_TOPIC_MESSAGE, HTTP-MQ).

        ``count``/``ack_timeout_ms`` ≤ 0 take the policy's batch size / ack timeout.
        ``owner`` identifies the lock holder (connection or client); ``client_id`` is
        required for broadcast consumers. ``start_position`` ('earliest' | 'latest')
        applies to a partition the consumer has no ack index on yet; by default a
        broadcast client starts at its policy's ``start_position`` (HTTP-MQ §13.3: latest
        = the end at the client's first access) and a clustering consumer at 'earliest' —
        its 'latest' is pinned at approval with :meth:`register_consumer`, so nothing
        produced after approval is skipped.

        ``address`` is the client's address as its connection shows it (what blacklists
        see); ``reported_address`` is what the client says it is (HTTP-MQ ``clientIp``),
        recorded as the partition's last client instead of ``address``.

        The gate checks ``app``'s consumer policy: none → ConsumerNotFound; a
        blacklisted ``address`` → BLACKLISTED, paused → PAUSED, over its rate limit →
        RATE_LIMITED (none of them reads or locks). A fetch costs one permit of the
        rate limit and every message it returns one more (http-mq.md §11).
        """
        info = self.topic(topic)
        try:
            policy = self.gate.consumer(topic, app, address)
        except ConsumerClientNotAllowed:
            return FetchResult(FetchStatus.BLACKLISTED, topic)
        self._broadcast(info, policy, client_id)
        if policy.paused:
            return FetchResult(FetchStatus.PAUSED, topic)
        try:
            await self.gate.admit_fetch(policy)
        except RateLimited as exc:
            return FetchResult(
                FetchStatus.RATE_LIMITED, topic, retry_after_ms=self.now_ms() + exc.retry_after_ms
            )
        result = await self._fetch(
            info,
            policy,
            count if count > 0 else policy.batch_size,
            ack_timeout_ms,
            long_poll_ms,
            owner,
            client_id,
            reported_address or address,
            start_position,
        )
        await self.gate.charge_consume(policy, sum(d.count for d in result.messages))
        return result

    async def _fetch(
        self,
        info: TopicInfo,
        policy: ConsumerPolicyInfo,
        count: int,
        ack_timeout_ms: int,
        long_poll_ms: int,
        owner: str,
        client_id: str | None,
        address: str,
        start_position: str | None,
    ) -> FetchResult:
        topic, app = info.code, policy.app
        if client_id:
            await self.redis.zadd(GroupKeys(topic, app).clients, {client_id: self.now_ms()})
        req = FetchRequest(
            topic=info,
            app=app,
            policy=policy,
            partitions=self.readable_partitions(info),
            count=count,
            ack_timeout_ms=ack_timeout_ms if ack_timeout_ms > 0 else policy.ack_timeout_ms,
            owner=owner,
            client_id=client_id,
            address=address,
            sequential=info.type == "sequential" or policy.sequential,
            init=start_position or (policy.start_position if client_id else "earliest"),
        )
        result = await self._fetcher.fetch(req, long_poll_ms)
        if result.found:
            self.counters.record(
                topic=topic,
                app=app,
                broker=self.broker_id,
                consumed=sum(d.count for d in result.messages),
                consumed_bytes=sum(len(d.record) for d in result.messages),
            )
        return result

    async def ack(
        self,
        topic: str,
        app: str,
        partition: int,
        indexes: Sequence[int],
        *,
        retry_type: RetryType = RetryType.NONE,
        owner: str = "",
        token: int | None = None,
        client_id: str | None = None,
        reason: str | None = None,
    ) -> AckResult:
        """JMQ4 COMMIT_ACK of a contiguous run of indexes on one partition.

        Partition 32767 acks retry ids. A ``retry_type`` other than NONE copies the
        messages to the retry store and still acks (a sequential topic, or a policy with
        retry off and no force-ack, only releases the lock: the run is delivered again).
        """
        info = self.topic(topic)
        policy = self._consumer(topic, app)
        self._broadcast(info, policy, client_id)
        start, end = contiguous(indexes)
        now = self.now_ms()
        if partition == RETRY_PARTITION:
            return await self._ack_retries(topic, app, policy, start, end, retry_type, now, reason)
        self._partition(info, partition)
        cid = consumer_id(app, client_id)
        retry_ids: tuple[int, ...] = ()
        if retry_type is not RetryType.NONE:
            sequential = info.type == "sequential" or policy.sequential
            if sequential or not (policy.retry or self.force_ack):
                await release(self.redis, topic, partition, cid, token, owner)
                mn, _ = await bounds(self.redis, topic, partition)
                state = await self.redis.hget(PartitionKeys(topic, partition).state(cid), "ack")
                return AckResult(AckStatus.REDELIVER, int(state) if state else mn)
            if policy.retry:
                retry_ids = await self._copy_to_retry(
                    topic, app, partition, start, end, now, reason or retry_type.name
                )
        status, ack = await ack_mod.ack_range(
            self.redis, topic, partition, cid, start, end, owner=owner, token=token, now_ms=now
        )
        return AckResult(status, ack, retry_ids)

    async def _copy_to_retry(
        self, topic: str, app: str, partition: int, start: int, end: int, now: int, reason: str
    ) -> tuple[int, ...]:
        try:
            records = await read_range(self.redis, topic, partition, start, end - start)
        except IndexOutOfRange:
            return ()
        items = [(partition, d.index, d.count, d.record) for d in records if d.index < end]
        if not items:
            return ()
        store = RetryStore(self.redis, topic, app)
        ids = await store.add(
            items, now_ms=now, due_ms=now + self.retry_policy.base_ms, reason=reason
        )
        return tuple(ids)

    async def _ack_retries(
        self,
        topic: str,
        app: str,
        policy: ConsumerPolicyInfo,
        start: int,
        end: int,
        retry_type: RetryType,
        now: int,
        reason: str | None,
    ) -> AckResult:
        store = RetryStore(self.redis, topic, app)
        ids = list(range(start, min(end, start + 10_000)))
        ok = retry_type is RetryType.NONE
        done, dead = await store.settle(
            ids,
            ok=ok,
            now_ms=now,
            policy=self._retry_for(policy),
            reason=reason or "MaxRetriesExceeded",
        )
        status = AckStatus.OK if done else AckStatus.ALREADY
        return AckResult(status, end, dead_lettered=dead)

    async def commit(
        self,
        topic: str,
        app: str,
        partition: int,
        *,
        offset: int,
        next_offset: int,
        lock_time: int,
        force: bool = False,
        client_id: str | None = None,
    ) -> CommitResult:
        """HTTP-MQ acknowledgement of a requestId (http-mq.md §7); releases the lock."""
        info = self.topic(topic)
        policy = self._consumer(topic, app)
        self._broadcast(info, policy, client_id)
        self._partition(info, partition)
        if offset < 0 or (next_offset < offset and not force):
            raise InvalidMessage(f"ack illegal {partition}:{offset},{next_offset}")
        status, cmt, lt, expired, anomaly = await ack_mod.commit(
            self.redis,
            topic,
            partition,
            consumer_id(app, client_id),
            offset=offset,
            next_offset=next_offset,
            lock_time=lock_time,
            force=force,
            now_ms=self.now_ms(),
        )
        return CommitResult(status, cmt, lt, expired, anomaly)

    async def unlock(
        self,
        topic: str,
        app: str,
        partition: int,
        *,
        token: int | None = None,
        client_id: str | None = None,
    ) -> bool:
        """Release a partition lock without committing (only if ``token`` still holds it)."""
        info = self.topic(topic)
        self._partition(info, partition)
        return await release(self.redis, topic, partition, consumer_id(app, client_id), token)

    # ------------------------------------------------------------------ offsets

    async def reset_offsets(
        self,
        topic: str,
        app: str,
        *,
        position: str | int | None = None,
        timestamp_ms: int | None = None,
        partition: int | None = None,
        client_id: str | None = None,
    ) -> dict[int, int]:
        """Set the ack index: ``position`` 'earliest' | 'latest' | an index, or the first
        message stored at/after ``timestamp_ms``; one partition or all. For a broadcast
        consumer without ``client_id`` every registered client is reset. Returns the new
        ack index per partition (of the last client reset)."""
        info = self.topic(topic)
        policy = self._consumer(topic, app)
        parts = range(info.partitions) if partition is None else [partition]
        for p in parts:
            self._partition(info, p)
        if (position is None) == (timestamp_ms is None):
            raise InvalidMessage("give exactly one of position and timestamp_ms")
        broadcast = policy.broadcast or info.type == "broadcast"
        clients: list[str | None] = [client_id]
        if broadcast and client_id is None:
            clients = list(await self.broadcast_clients(topic, app, active_within_ms=None))
        result: dict[int, int] = {}
        for cid_client in clients:
            cid = consumer_id(app, cid_client)
            for p in parts:
                target: int | str = (
                    position
                    if position is not None
                    else await index_at_time(
                        self.redis,
                        topic,
                        p,
                        timestamp_ms,  # type: ignore[arg-type]
                    )
                )
                result[p] = await offsets_mod.set_ack(self.redis, topic, p, cid, target)
        return result

    async def register_consumer(
        self, topic: str, app: str, *, start: str = "latest", client_id: str | None = None
    ) -> dict[int, int]:
        """Pin the start position of a new consumer (HTTP-MQ §13.3): partitions without an
        ack index get the current end ('latest') or the first retained index."""
        info = self.topic(topic)
        self._consumer(topic, app)
        cid = consumer_id(app, client_id)
        return {
            p: await offsets_mod.set_ack(self.redis, topic, p, cid, start, only_if_missing=True)
            for p in range(info.partitions)
        }

    async def progress(
        self,
        topic: str,
        app: str,
        *,
        client_id: str | None = None,
        partitions: Sequence[int] | None = None,
    ) -> list[PartitionProgress]:
        """Per partition (all, or ``partitions``): min, max, ack index, lag, lock owner and
        expiry, last access and address."""
        info = self.topic(topic)
        parts = range(info.partitions) if partitions is None else partitions
        for p in parts:
            self._partition(info, p)
        return await offsets_mod.progress(
            self.redis, topic, parts, consumer_id(app, client_id), self.now_ms()
        )

    async def group_lags(
        self, groups: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], GroupLag]:
        """Lag and oldest unacked message of many consumer groups ``(topic, app)`` — what
        :meth:`progress` sums for one — in two round trips whatever their number; groups
        of topics not in the catalog are left out."""
        refs = [
            overview.GroupRef(topic, app, info.partitions)
            for topic, app in groups
            if (info := self.catalog.topics.get(topic)) is not None
        ]
        return {(r.topic, r.app): r for r in await overview.group_lags(self.redis, refs)}

    async def produce_rates(
        self, topics: Sequence[str], *, minutes: int = 5
    ) -> dict[str, TopicRate]:
        """Messages produced to each topic in the last ``minutes`` whole minutes (one
        pipelined round trip for all of them)."""
        await self.counters.flush()
        rates = await overview.produce_rates(
            self.redis, list(topics), minutes=minutes, now_ms=self.now_ms()
        )
        return {r.topic: r for r in rates}

    async def broadcast_clients(
        self, topic: str, app: str, *, active_within_ms: int | None = 600_000
    ) -> list[str]:
        """Registered broadcast clientIds (seen within ``active_within_ms``; None = all)."""
        key = GroupKeys(topic, app).clients
        low = "-inf" if active_within_ms is None else self.now_ms() - active_within_ms
        return [c.decode() for c in await self.redis.zrangebyscore(key, low, "+inf")]

    # ------------------------------------------------------------------ retries and DLQ

    def retry_store(self, topic: str, app: str) -> RetryStore:
        self.topic(topic)
        return RetryStore(self.redis, topic, app)

    async def retry(
        self, topic: str, app: str, partition: int, indexes: Sequence[int], *, reason: str = "Retry"
    ) -> tuple[int, ...]:
        """Copy stored messages into the consumer group's retry store (no ack)."""
        info = self.topic(topic)
        self._partition(info, partition)
        start, end = contiguous(indexes)
        return await self._copy_to_retry(topic, app, partition, start, end, self.now_ms(), reason)

    async def retries(
        self, topic: str, app: str, offset: int = 0, limit: int = 100
    ) -> list[RetryRecord]:
        return await self.retry_store(topic, app).list_retries(offset, limit)

    async def dead_letters(
        self, topic: str, app: str, offset: int = 0, limit: int = 100
    ) -> list[RetryRecord]:
        return await self.retry_store(topic, app).list_dead_letters(offset, limit)

    async def retry_counts(self, topic: str, app: str) -> tuple[int, int]:
        """(messages waiting for a retry, dead letters)."""
        return await self.retry_store(topic, app).counts()

    async def resend_dead_letters(self, topic: str, app: str, ids: Sequence[int] = ()) -> int:
        """Dead letters (all if ``ids`` is empty) back to the retry store, due now."""
        return await self.retry_store(topic, app).resend_dead_letters(ids, now_ms=self.now_ms())

    async def skip_dead_letters(self, topic: str, app: str, ids: Sequence[int]) -> int:
        """Delete the chosen dead letters."""
        if not ids:
            return 0
        return await self.retry_store(topic, app).remove("dlq", ids)

    async def purge_dead_letters(
        self, topic: str, app: str, *, before_ms: int | None = None
    ) -> int:
        """Delete every dead letter (or those dead-lettered before ``before_ms``)."""
        return await self.retry_store(topic, app).remove("dlq", before_ms=before_ms)

    async def resend_retries(self, topic: str, app: str, ids: Sequence[int] = ()) -> int:
        """Make retries (all if ``ids`` is empty) due now."""
        return await self.retry_store(topic, app).retry_now(ids, now_ms=self.now_ms())

    async def skip_retries(self, topic: str, app: str, ids: Sequence[int]) -> int:
        """Delete the chosen retries (treated as consumed)."""
        if not ids:
            return 0
        return await self.retry_store(topic, app).remove("retry", ids)

    async def purge_retries(self, topic: str, app: str) -> int:
        """Delete every retry of the consumer group."""
        return await self.retry_store(topic, app).remove("retry")

    # ------------------------------------------------------------------ counters

    async def traffic(
        self, dimension: str, name: str, start_ms: int, end_ms: int
    ) -> list[MinuteTraffic]:
        """Per-minute produce/consume counts and bytes of a 'topic', 'app' or 'broker'."""
        await self.counters.flush()
        return await self.counters.traffic(dimension, name, start_ms, end_ms)

    # ------------------------------------------------------------------ transactions

    def _tx(self, topic: str, app: str) -> Transactions:
        self.topic(topic)
        return Transactions(self.redis, self.durability, topic, app)

    async def prepare_transaction(
        self,
        topic: str,
        app: str,
        *,
        transaction_id: str = "",
        timeout_ms: int = 1_800_000,
        client_address: str | None = None,
    ) -> str:
        """Open a transaction (JMQ4 PREPARE) past the gate; the broker-generated txId."""
        self.gate.producer(topic, app, client_address)
        return await self._tx(topic, app).prepare(transaction_id, timeout_ms, self.now_ms())

    async def append_to_transaction(
        self,
        topic: str,
        app: str,
        tx_id: str,
        messages: Sequence[Message | bytes] | WireRecords | WireBlob,
        *,
        partition: int | None = None,
        client_address: str | None = None,
    ) -> int:
        """Log messages in an open transaction (not visible until commit); messages logged.

        The gate checks the producer policy and takes the rate limit's permits here, when
        the messages are given; the commit appends what was logged."""
        if not messages:
            raise InvalidMessage("no messages")
        policy = self.gate.producer(topic, app, client_address)
        snap = self._catalog()
        info = self.topic(topic)
        if isinstance(messages, WireBlob):
            messages = check_wire(messages.blob, messages.count, self.max_body)
        first = None if isinstance(messages, WireRecords) else messages[0]
        chosen = choose_partition(
            snap,
            info,
            policy,
            partition=partition,
            business_id=first.business_id if isinstance(first, Message) else "",
            rng=self._rng,
        )
        wire = self._wire(messages)
        now = self.now_ms()
        if wire is not None:
            stamped = wire.stamp(partition=chosen, now_ms=now, client_address=client_address)
            records = wire.records(stamped)
        else:
            records = self._encode(messages, app, chosen, now, client_address)  # type: ignore[arg-type]
        await self.gate.admit_produce(policy, sum(c for _, c in records))
        return await self._tx(topic, app).add(tx_id, [(chosen, r, c) for r, c in records])

    async def commit_transaction(
        self, topic: str, app: str, tx_id: str, *, qos: QoS = QoS.RECEIVED
    ) -> dict[int, int]:
        """Append the transaction's messages (atomic per partition, idempotent)."""
        return await self._tx(topic, app).commit(tx_id, qos)

    async def rollback_transaction(self, topic: str, app: str, tx_id: str) -> None:
        """Discard an open transaction (TransactionNotFound if it is not open)."""
        await self._tx(topic, app).rollback(tx_id)

    async def transaction_feedback(self, topic: str, app: str) -> TransactionInfo | None:
        """One overdue open transaction with a query id (JMQ4 FETCH_PRODUCE_FEEDBACK)."""
        return await self._tx(topic, app).feedback(self.now_ms())

    async def open_transactions(self, topic: str, app: str) -> list[TransactionInfo]:
        return await self._tx(topic, app).open()

    async def sweep_transactions(self, topic: str, app: str) -> int:
        """Drop expired transactions and finish interrupted commits (Celery calls this)."""
        return await self._tx(topic, app).sweep(self.now_ms())

    # ------------------------------------------------------------------ retention

    async def trim(self, topic: str) -> dict[int, int]:
        """Apply the topic's retention to every partition; the new min index of each."""
        info = self.topic(topic)
        now = self.now_ms()
        return {p: await trim_partition(self.redis, info, p, now) for p in range(info.partitions)}

    async def trim_all(self) -> dict[str, dict[int, int]]:
        """Apply retention to every topic that has a limit."""
        return {
            code: await self.trim(code)
            for code, info in self._catalog().topics.items()
            if info.retention_max_age_s is not None or info.retention_max_count is not None
        }

    # ------------------------------------------------------------------ VibeMQ queues

    def _queue(self, topic: str, partition: int) -> Queues:
        return Queues(self.redis, self.durability, topic, partition, self.queue_retry)

    def _queue_settings(self, topic: str) -> QueueSettings:
        info = self._catalog().topics.get(topic)
        if info is not None:
            return info.queue
        if topic.endswith(".dlq"):  # a DLQ is created on first use with the defaults
            return QueueSettings()
        raise TopicNotFound(f"queue {topic} does not exist")

    async def queue_publish(
        self,
        topic: str,
        app: str,
        message: Message,
        *,
        partition: int = 0,
        qos: QoS = QoS.PERSISTED,
        client_address: str | None = None,
    ) -> AppendResult:
        """Publish to a queue with its priority, max size and overflow policy.

        ``dropped`` (DropNewest) and ``dead_lettered`` (RedirectToDlq) say where the
        message went; BlockPublisher raises QueueFull.
        """
        [result] = await self.queue_publish_many(
            topic, app, [message], partition=partition, qos=qos, client_address=client_address
        )
        if isinstance(result, EngineError):
            raise result
        return result

    async def queue_publish_many(
        self,
        topic: str,
        app: str,
        messages: Sequence[Message],
        *,
        partition: int = 0,
        qos: QoS = QoS.PERSISTED,
        client_address: str | None = None,
    ) -> list[AppendResult | EngineError]:
        """:meth:`queue_publish` for several messages in order, with one Redis round trip.

        The gate refuses the whole call when ``app`` has no producer policy on the queue's
        topic or ``client_address`` is blacklisted. Otherwise it returns one entry per
        message: its AppendResult, or the error that message alone met (an invalid or
        oversized message, QueueFull under BlockPublisher, RateLimited past the permits
        the producer's rate limit gave); the others are stored all the same. Errors of
        the store itself raise for the whole call.
        """
        settings = self._queue_settings(topic)
        policy = self.gate.producer(topic, app, client_address)
        now = self.now_ms()
        results: list[AppendResult | EngineError | None] = [None] * len(messages)
        admitted = len(messages)
        if policy.rate_limit:
            admitted = await self.gate.admit_produce_up_to(policy, len(messages))
            for pos in range(admitted, len(messages)):
                results[pos] = RateLimited(
                    f"producer {policy.name} is over its {policy.rate_limit}/s limit"
                )
        items: list[tuple[bytes, int, int]] = []
        positions: list[int] = []
        for pos, message in enumerate(messages[:admitted]):
            try:
                record, count = encode_record(
                    message,
                    app=app,
                    partition=partition,
                    now_ms=now,
                    client_address=client_address,
                    max_body=self.max_body,
                )
            except EngineError as exc:
                results[pos] = exc
                continue
            items.append((record, count, message.priority))
            positions.append(pos)
        outcomes = await self._queue(topic, partition).publish_many(
            items, settings=settings, qos=qos
        )
        produced = size = 0
        for pos, (record, count, _), outcome in zip(positions, items, outcomes, strict=True):
            if isinstance(outcome, EngineError):
                results[pos] = outcome
            elif outcome.dead_lettered:
                await self._to_queue_dlq(
                    topic, app, record, reason="QueueOverflow", attempts=0, qos=qos
                )
                results[pos] = AppendResult(topic, partition, -1, (), 0, now, dead_lettered=True)
            elif outcome.dropped:
                results[pos] = AppendResult(topic, partition, -1, (), 0, now, dropped=True)
            else:
                produced, size = produced + count, size + len(record)
                results[pos] = AppendResult(
                    topic, partition, outcome.index, (outcome.index,), count, now
                )
        if produced:
            self.counters.record(
                topic=topic, app=app, broker=self.broker_id, produced=produced, produced_bytes=size
            )
        return [r for r in results if r is not None]

    async def _to_queue_dlq(
        self, topic: str, app: str, record: bytes, *, reason: str, attempts: int, qos: QoS
    ) -> None:
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
        dlq = f"{topic}.dlq"
        new, count = encode_record(msg, app=stored.app or app, partition=0, now_ms=self.now_ms())
        await self._queue(dlq, 0).publish(
            new, count, priority=stored.priority, settings=self._queue_settings(dlq), qos=qos
        )

    async def queue_take(
        self,
        topic: str,
        app: str,
        *,
        address: str | None = None,
        count: int = 1,
        lease_ms: int = 30_000,
        partition: int = 0,
    ) -> list[Delivery]:
        """Lease ready messages for ``app`` (priority order in PriorityBased mode; TTL
        enforced). The gate checks ``app``'s consumer policy (none, or a blacklisted
        ``address``: refused); a paused consumer gets nothing; under a rate limit at most
        as many as there are permits (RateLimited when there are none)."""
        policy = self.gate.consumer(topic, app, address)
        if policy.paused or count <= 0:
            if self._queue_settings(topic).message_ttl_ms is not None:
                await self.queue_sweep(topic, partition=partition)
            return []
        granted = await self.gate.admit_consume(policy, count)
        try:
            got = await self._take(topic, granted, lease_ms, partition)
        except BaseException:
            if policy.rate_limit:
                with contextlib.suppress(Exception):
                    await self.gate.refund_consume(policy, granted)
            raise
        await self.gate.refund_consume(policy, granted - len(got))
        return got

    async def queue_take_for_copies(
        self, topic: str, *, count: int, lease_ms: int, partition: int = 0
    ) -> list[Delivery]:
        """Lease ready messages of a fan-out queue to copy them to its subscribers. No app
        takes them: each subscriber's copies pass the gate when they are claimed
        (:meth:`claim_copies`) or handed on (:meth:`admit_deliveries`)."""
        return await self._take(topic, count, lease_ms, partition)

    async def queue_sweep(self, topic: str, *, partition: int = 0) -> None:
        """Expire the queue's TTL'd messages now (dead-letter or count them), leasing
        nothing: the brokers' periodic sweep of queues nobody consumes."""
        await self._take(topic, 0, 0, partition)

    async def _take(self, topic: str, count: int, lease_ms: int, partition: int) -> list[Delivery]:
        settings = self._queue_settings(topic)
        got = await self._queue(topic, partition).take(
            now_ms=self.now_ms(), count=count, lease_ms=lease_ms, settings=settings
        )
        await self.queue_flush_dead(topic, partition=partition)
        return got

    async def queue_flush_dead(self, topic: str, *, partition: int = 0) -> int:
        """Copy dead (expired / out of retries) messages to the DLQ, or count them dropped."""
        settings = self._queue_settings(topic)
        queue = self._queue(topic, partition)
        moved = 0
        while True:
            dead = await queue.dead(100)
            if not dead:
                return moved
            if settings.dead_letter_enabled:
                for _member, _idx, attempts, reason, record in dead:
                    if record:
                        await self._to_queue_dlq(
                            topic, "", record, reason=reason, attempts=attempts, qos=QoS.RECEIVED
                        )
            await queue.drop_dead([d[0] for d in dead], counted=not settings.dead_letter_enabled)
            moved += len(dead)

    async def queue_ack(self, topic: str, indexes: Sequence[int], *, partition: int = 0) -> int:
        """Settle deliveries for good; unknown or already settled ones are ignored."""
        return await self._queue(topic, partition).settle(
            "ack", list(indexes), now_ms=self.now_ms(), settings=self._queue_settings(topic)
        )

    async def queue_fail(self, topic: str, indexes: Sequence[int], *, partition: int = 0) -> int:
        """Count a failed attempt now: retry with backoff, or dead-letter past the limit."""
        settings = self._queue_settings(topic)
        n = await self._queue(topic, partition).settle(
            "fail", list(indexes), now_ms=self.now_ms(), settings=settings
        )
        await self.queue_flush_dead(topic, partition=partition)
        return n

    async def queue_release(self, topic: str, indexes: Sequence[int], *, partition: int = 0) -> int:
        """Return deliveries to the queue head at once (a subscriber went away)."""
        return await self._queue(topic, partition).settle(
            "release", list(indexes), now_ms=self.now_ms(), settings=self._queue_settings(topic)
        )

    async def queue_stats(self, topic: str, *, partition: int = 0) -> QueueStats:
        return await self._queue(topic, partition).stats()

    async def queue_purge(self, topic: str, *, partition: int = 0) -> None:
        """Delete a queue's messages and in-flight tracking (VibeMQ deleteQueue)."""
        await self._queue(topic, partition).purge()

    async def queue_dead_letter(
        self, topic: str, record: bytes, *, reason: str, attempts: int, qos: QoS = QoS.RECEIVED
    ) -> bool:
        """Dead-letter a message held outside the queue's sets (a fan-out copy): copy it to
        the DLQ when the queue has one (True), else count it dropped (False)."""
        if not self._queue_settings(topic).dead_letter_enabled:
            await self.redis.hincrby(PartitionKeys(topic, 0).meta, "dropped", 1)
            return False
        await self._to_queue_dlq(topic, "", record, reason=reason, attempts=attempts, qos=qos)
        return True

    async def claim_copies(
        self,
        topic: str,
        app: str,
        identity: str,
        *,
        address: str | None = None,
        count: int,
        lease_ms: int,
        max_retry: int,
        retention_ms: int | None = None,
    ) -> Claim:
        """:meth:`FanoutCopies.claim` of ``identity``'s copies for a subscriber of
        ``app``, past the gate: no consumer policy or a blacklisted ``address`` is
        refused, a paused consumer claims nothing, a rate limit caps the claim."""
        policy = self.gate.consumer(topic, app, address)
        if policy.paused or count <= 0:
            return Claim()
        granted = await self.gate.admit_consume(policy, count)
        copies = self.fanout_copies(topic, retention_ms=retention_ms)
        claim = await copies.claim(identity, count=granted, lease_ms=lease_ms, max_retry=max_retry)
        await self.gate.refund_consume(policy, granted - len(claim.deliveries))
        return claim

    async def admit_deliveries(
        self, topic: str, app: str, count: int, *, address: str | None = None
    ) -> int:
        """How many of ``count`` messages pushed outside a lease (fan-out copies without
        ack) ``app`` may receive now: 0 while paused or over its rate limit; refused
        without a consumer policy or from a blacklisted ``address``."""
        policy = self.gate.consumer(topic, app, address)
        if policy.paused:
            return 0
        try:
            return await self.gate.admit_consume(policy, count)
        except RateLimited:
            return 0

    def fanout_copies(self, topic: str, *, retention_ms: int | None = None) -> FanoutCopies:
        """The per-subscriber copies of fan-out queue ``topic`` (see :mod:`.copies`),
        retried with the engine's ``queue_retry`` backoff."""
        extra = {} if retention_ms is None else {"retention_ms": retention_ms}
        return FanoutCopies(
            self.redis,
            topic,
            self.now_ms,
            retry_base_ms=self.queue_retry.base_ms,
            retry_cap_ms=self.queue_retry.cap_ms,
            **extra,
        )

    # ------------------------------------------------------------------ operator resends

    async def add_resend(
        self,
        topic: str,
        app: str,
        entries: Sequence[tuple[int, int]],
        *,
        client_id: str | None = None,
    ) -> int:
        """Queue (partition, index) messages to be handed once to the consumer (HTTP-MQ
        ``retryMsgId``); a broadcast consumer without ``client_id`` queues them for every
        registered client."""
        info = self.topic(topic)
        policy = self._consumer(topic, app)
        for p, _ in entries:
            self._partition(info, p)
        clients: list[str | None] = [client_id]
        if (policy.broadcast or info.type == "broadcast") and client_id is None:
            clients = list(await self.broadcast_clients(topic, app))
        return await resend_mod.add(self.redis, topic, app, entries, clients)

    async def append_delayed(
        self,
        topic: str,
        app: str,
        message: Message,
        *,
        deliver_at_ms: int,
        partition: int | None = None,
        client_address: str | None = None,
    ) -> int:
        """Hold ``message`` until ``deliver_at_ms`` (a delayed or timer message; a time
        already past is due at once).

        It is checked now exactly as :meth:`append` would (policy, blacklist, rate limit,
        size) and appended by :meth:`release_delayed` once due. Returns its delay id.
        """
        info = self.topic(topic)
        policy = self.gate.producer(topic, app, client_address)
        if partition is not None and partition >= 0:
            self._partition(info, partition)
        now = self.now_ms()
        if deliver_at_ms > now + MAX_DELAY_MS:
            raise InvalidMessage("delivery time must be at most 30 days ahead")
        deliver_at_ms = max(deliver_at_ms, now)  # a time already past is due at once
        self._encode([message], app, 0, now, client_address)  # validates size and fields
        await self.gate.admit_produce(policy, 1)
        held = Held(
            app=app,
            partition=partition,
            client_address=client_address,
            body=bytes(message.body),
            business_id=message.business_id,
            attributes=dict(message.attributes) if message.attributes else None,
            priority=message.priority,
            send_time_ms=message.send_time_ms or now,
        )
        return await DelayStore(self.redis, topic).add(held, deliver_at_ms)

    async def release_delayed(self, topic: str, *, limit: int = 1000) -> int:
        """Append this topic's due delayed messages; returns how many were appended."""
        store = DelayStore(self.redis, topic)
        token = await store.lock(ttl_ms=30_000)
        if token is None:
            return 0
        moved = 0
        try:
            for delay_id, held in await store.due(self.now_ms(), limit):
                message = Message(
                    body=held.body,
                    business_id=held.business_id,
                    attributes=held.attributes,
                    priority=held.priority,
                    send_time_ms=held.send_time_ms,
                )
                await self._append(
                    topic,
                    held.app,
                    [message],
                    partition=held.partition,
                    qos=QoS.RECEIVED,
                    client_address=held.client_address,
                )
                await store.remove([delay_id])
                moved += 1
            await store.forget_if_empty()
        finally:
            await store.unlock(token)
        return moved

    async def release_all_delayed(self) -> int:
        """Release the due delayed messages of every topic that holds some."""
        moved = 0
        for topic in await topics_with_delays(self.redis):
            if topic in self._catalog().topics:
                moved += await self.release_delayed(topic)
        return moved

    async def delayed_pending(self, topic: str) -> int:
        """How many delayed messages of ``topic`` wait for their time."""
        return await DelayStore(self.redis, topic).pending()

    async def take_resends(
        self, topic: str, app: str, *, client_id: str | None = None, limit: int = 32
    ) -> list[Delivery]:
        """Pop queued resends (each is returned exactly once, cluster-wide)."""
        self.topic(topic)
        return await resend_mod.take(self.redis, topic, app, client_id, limit)


def _store_errors(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except REDIS_DOWN as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc

    return guarded


# Every public coroutine of the facade reports an unreachable Redis as StoreUnavailable.
for _name, _method in list(vars(Engine).items()):
    if not _name.startswith("_") and inspect.iscoroutinefunction(_method):
        setattr(Engine, _name, _store_errors(_method))
