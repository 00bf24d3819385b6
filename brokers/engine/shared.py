"""Leasing to competing and streaming consumers of a group, across a topic's partitions.

The engine facade's section for push consumers (zbus MQ sessions, VibeMQ subscribers):
it picks the partitions this broker serves, leases one batch with :mod:`.groups` (one
script call per partition tried), and handles what a lease hands back besides live
messages — records past their TTL and ranges out of attempts — by dead-lettering them:
to the topic's dead-letter queue ``<topic>.dlq`` when the topic has one, else TTL-expired
records are counted dropped and dead ones go to the group's dead-letter queue (the retry
store's, listed and resent from the console). Nothing leaves silently.

Settling, releasing and failing take the deliveries' indexes per partition and cost one
script call per partition, whatever the number of messages. What a release makes due at
once (a consumer that went away, read-ahead handed back unread) is announced on the
topic's notification channel, as an append is, so waiters elsewhere take it now.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from brokers.engine import groups
from brokers.engine.catalog import ConsumerPolicyInfo, TopicInfo
from brokers.engine.groups import EMPTY, FOUND, GroupLease, LeaseArgs, runs_of
from brokers.engine.keys import consumer_id
from brokers.engine.model import Delivery
from brokers.engine.notify import announce
from brokers.engine.priority import is_prioritized
from brokers.engine.read import read_chunks
from brokers.engine.redisio import AnyRedis
from brokers.engine.retry import RetryStore
from brokers.engine.unbatch import one_by_one

FAN_OUT = ("FanOutWithAck", "FanOutWithoutAck")
AVAILABLE_AGAIN = ("release", "unread")
"""Settle modes that make deliveries due at once (``fail`` makes them due after a backoff)."""
"""Delivery modes whose subscribers are broadcast members of their group."""

DeadLetter = Callable[[str, str, Delivery, str, int], Awaitable[bool]]
"""``(topic, app, delivery, reason, attempts)`` → True when copied to the topic's DLQ."""


@dataclass(slots=True)
class Lease:
    """One lease: live deliveries of one partition (empty when nothing was servable).

    ``retry_after_ms`` (wall clock) says when a locked, delayed or backed-off range may
    be servable again, if known. ``more``: a lease that found something says whether more
    is servable at once — in its partition (past the batch, or due again), or in a
    partition it did not look at. A consumer told ``more=False`` need not lease again
    before the topic's next notification or ``retry_after_ms``: that lease would find
    nothing.
    """

    topic: str
    app: str
    partition: int = -1
    deliveries: list[Delivery] = field(default_factory=list)
    retry_after_ms: int | None = None
    more: bool = False

    @property
    def found(self) -> bool:
        return bool(self.deliveries)


@dataclass(frozen=True, slots=True)
class QueueRetry:
    """Backoff of failed and expired deliveries: ``base_ms`` · 2^(attempt−1), capped."""

    base_ms: int = 2_000
    cap_ms: int = 120_000


class SharedDelivery:
    """Leases, settles, releases and fails for consumer groups (see the module docstring)."""

    def __init__(
        self,
        client: AnyRedis,
        now_ms: Callable[[], int],
        dead_letter: DeadLetter,
        retry: QueueRetry,
    ) -> None:
        self._client = client
        self._now_ms = now_ms
        self._dead_letter = dead_letter
        self.retry = retry
        self._rotation: dict[tuple[str, str], itertools.count] = defaultdict(itertools.count)

    def args(
        self, topic: TopicInfo, policy: ConsumerPolicyInfo, lease_ms: int, init: str
    ) -> LeaseArgs:
        """How ``policy``'s group leases ``topic``."""
        delay = policy.delay_ms
        return LeaseArgs(
            lease_ms=lease_ms,
            init=init,
            member=topic.queue.delivery_mode in FAN_OUT,
            max_store_ms=self._now_ms() - delay if delay > 0 else None,
            max_retry=topic.queue.max_retry_attempts,
            ttl_ms=topic.queue.message_ttl_ms,
            backoff_base_ms=self.retry.base_ms,
            backoff_cap_ms=self.retry.cap_ms,
        )

    async def lease(
        self,
        topic: TopicInfo,
        policy: ConsumerPolicyInfo,
        partitions: Sequence[int],
        *,
        count: int,
        owner: str,
        address: str,
        client_id: str | None,
        args: LeaseArgs,
    ) -> Lease:
        """Lease up to ``count`` messages from the first of ``partitions`` (rotated per
        consumer so equal partitions are served in turn; in band order on a priority
        topic, :mod:`.priority`) that has some."""
        cid = consumer_id(policy.app, client_id)
        result = Lease(topic.code, policy.app)
        if not partitions:
            return result
        if is_prioritized(topic):  # the highest band with messages first
            order = tuple(sorted(partitions))
        else:  # equal partitions are served in turn
            turn = next(self._rotation[(topic.code, cid)]) % len(partitions)
            order = (*partitions[turn:], *partitions[:turn])
        hints: list[int] = []
        now = self._now_ms()
        for p in order:
            got = await groups.lease(
                self._client,
                topic.code,
                p,
                cid,
                now_ms=now,
                want=count,
                owner=owner,
                address=address,
                args=args,
            )
            await self._aftermath(topic, policy, cid, got)
            if got.status == FOUND:
                result.partition = p
                result.deliveries = one_by_one(got.deliveries, got.runs)
                # partitions after p in this turn were not looked at: they may have some
                result.more = 0 < got.hint_ms <= now or p != order[-1]
                if not result.more:
                    if got.hint_ms:
                        hints.append(got.hint_ms)
                    result.retry_after_ms = min(hints, default=None)
                return result
            if got.hint_ms:  # LOCKED or EMPTY
                hints.append(got.hint_ms)
        result.retry_after_ms = min(hints) if hints else None
        return result

    async def _aftermath(
        self, topic: TopicInfo, policy: ConsumerPolicyInfo, cid: str, got: GroupLease
    ) -> None:
        """Dead-letter what the lease found expired (TTL) or out of attempts."""
        for d in got.expired:
            copied = await self._dead_letter(topic.code, policy.app, d, "MessageExpired", 0)
            if not copied:
                await groups.count_dropped(self._client, topic.code, d.partition, d.count)
        for start in got.dead:
            runs = await groups.dead_runs(self._client, topic.code, got.partition, cid, start)
            for first, end in runs:
                chunks = read_chunks(self._client, topic.code, got.partition, first, end)
                async for d in _each(chunks):
                    copied = await self._dead_letter(
                        topic.code,
                        policy.app,
                        d,
                        "MaxRetriesExceeded",
                        topic.queue.max_retry_attempts + 1,
                    )
                    if not copied:
                        await RetryStore(self._client, topic.code, policy.app).dead_letter(
                            [(d.partition, d.index, d.count, d.record)],
                            now_ms=self._now_ms(),
                            reason="MaxRetriesExceeded",
                            attempts=topic.queue.max_retry_attempts + 1,
                        )
            await groups.settle(
                self._client,
                topic.code,
                got.partition,
                cid,
                runs,
                mode="drop",
                now_ms=self._now_ms(),
            )

    async def settle(
        self,
        topic: TopicInfo,
        policy: ConsumerPolicyInfo,
        partition: int,
        indexes: Sequence[int],
        *,
        mode: str,
        client_id: str | None,
    ) -> int:
        """``ack`` / ``release`` / ``fail`` the deliveries at ``indexes``; how many
        indexes changed. Failures past the attempt limit are dead-lettered at once."""
        changed, _ = await self._settle(
            topic, policy, partition, runs_of(indexes), mode=mode, client_id=client_id
        )
        if changed and mode in AVAILABLE_AGAIN:
            await self._announce(topic.code, partition)
        return changed

    async def keep(
        self,
        topic: TopicInfo,
        policy: ConsumerPolicyInfo,
        partition: int,
        index: int,
        *,
        owner: str,
        lease_ms: int,
        client_id: str | None,
        keep_until: int = 0,
    ) -> int | None:
        """A failed attempt retried to the same lessee (``keep`` of :func:`groups.settle`):
        when its retry is due (engine ms) if ``owner`` still held it and it stays leased
        to it; None when it did not hold it, the retry would be due at ``keep_until`` or
        later, or the attempt was the last (dead-lettered at once)."""
        _, due = await self._settle(
            topic,
            policy,
            partition,
            [(index, index + 1)],
            mode="keep",
            client_id=client_id,
            owner=owner,
            lease_ms=lease_ms,
            keep_until=keep_until,
        )
        return due

    async def _settle(
        self,
        topic: TopicInfo,
        policy: ConsumerPolicyInfo,
        partition: int,
        runs: list[tuple[int, int]],
        *,
        mode: str,
        client_id: str | None,
        owner: str = "",
        lease_ms: int = 0,
        keep_until: int = 0,
    ) -> tuple[int, int | None]:
        """:func:`groups.settle` with the topic's retry limit and backoff, dead-lettering
        what went dead; (indexes changed, when a kept retry is due — None if none was)."""
        cid = consumer_id(policy.app, client_id)
        args = LeaseArgs(
            lease_ms=lease_ms,
            max_retry=topic.queue.max_retry_attempts,
            backoff_base_ms=self.retry.base_ms,
            backoff_cap_ms=self.retry.cap_ms,
        )
        _, changed, dead, due = await groups.settle(
            self._client,
            topic.code,
            partition,
            cid,
            runs,
            mode=mode,
            now_ms=self._now_ms(),
            args=args,
            owner=owner,
            keep_until=keep_until,
        )
        if dead:
            await self._aftermath(topic, policy, cid, GroupLease(EMPTY, partition, dead=dead))
        return changed, (due if changed and due and not dead else None)

    async def _announce(self, topic: str, partition: int | None) -> None:
        """Tell the topic's waiters in every process that messages are due now, as an
        append does: a consumer that found nothing does not look again before it hears
        of some (``None``: on any partition)."""
        await announce(self._client, topic, partition)

    async def release_owner(
        self,
        topic: TopicInfo,
        app: str,
        partitions: Sequence[int],
        owner: str,
        client_id: str | None,
        *,
        prefix: bool = False,
    ) -> int:
        """Everything ``owner`` (with ``prefix``: every owner whose name starts with it)
        leased on ``partitions`` is due again at once."""
        released = await groups.release_owner(
            self._client,
            topic.code,
            partitions,
            consumer_id(app, client_id),
            owner,
            now_ms=self._now_ms(),
            prefix=prefix,
        )
        if released:
            await self._announce(topic.code, None)
        return released


async def _each(chunks: AsyncIterator[list[Delivery]]) -> AsyncIterator[Delivery]:
    """The deliveries of :func:`~brokers.engine.read.read_chunks`, one by one."""
    async for chunk in chunks:
        for d in chunk:
            yield d
