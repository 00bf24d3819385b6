"""Consumer groups for push consumers (zbus sessions, VibeMQ subscribers): leases, settling,
releasing and failing, fan-out members, TTL sweeps, the numbers of a group and a queue.

A section of the :class:`~brokers.engine.engine.Engine` facade (a mixin on its shared state).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from brokers.engine.access import dead_letter_parent
from brokers.engine.catalog import (
    ConsumerPolicyInfo,
    TopicInfo,
)
from brokers.engine.erase import erase_group, erase_topic
from brokers.engine.errors import TopicNotFound
from brokers.engine.fan_out_stats import fan_out_stats
from brokers.engine.groups import (
    GroupStats,
    add_member,
    count_dropped,
    drop_member,
    group_stats,
    members_of_groups,
    purge_partitions,
)
from brokers.engine.groups import expire as expire_records
from brokers.engine.groups import forget as forget_progress
from brokers.engine.groups import join as join_group
from brokers.engine.groups import keep as keep_progress
from brokers.engine.groups import members as group_members
from brokers.engine.kept_settles import MISSED
from brokers.engine.keys import RETRY_PARTITION, consumer_id
from brokers.engine.model import Delivery
from brokers.engine.notify import announce
from brokers.engine.record import record_store_time, with_position
from brokers.engine.retry_presence import lease_first_due
from brokers.engine.sections.base import EngineBase
from brokers.engine.shared import AVAILABLE_AGAIN, FAN_OUT, Lease
from brokers.engine.unbatch import one_by_one

EXPIRE_RECHECK_MS = 10_000
"""The longest a topic's TTL sweep skips it on the strength of an earlier look."""
EXPIRE_CLOCK_MARGIN_MS = 1_000
"""Store times come from the clocks of the producing brokers: a look is repeated this much
before the first message left is due by ours."""


class GroupSection(EngineBase):
    """Consumer groups for push consumers (zbus sessions, VibeMQ subscribers)."""

    async def lease(
        self,
        topic: str,
        app: str,
        *,
        count: int,
        owner: str,
        address: str | None = None,
        client_id: str | None = None,
        lease_ms: int | None = None,
        start: str = "earliest",
    ) -> Lease:
        """Lease up to ``count`` messages for a consumer of ``app`` that settles them one by
        one (zbus MQ sessions, VibeMQ subscribers): from the first partition that has some
        (:mod:`.shared`; any broker serves these consumers, the store is shared). ``owner`` names the lessee (its connection),
        so :meth:`release_owner` returns what it held; ``client_id`` makes it a broadcast
        member with its own progress (started at ``start`` on first use). The gate checks
        the consumer policy (none, or a blacklisted ``address``: refused); a paused
        consumer gets nothing; a rate limit caps the batch (RateLimited when no permit)."""
        info = self.group_topic(topic)
        policy = self.gate.consumer(topic, app, address)
        result = Lease(topic, app)
        if policy.paused or count <= 0:
            return result
        granted = await self.gate.admit_consume(policy, count)
        lease_ms = lease_ms if lease_ms is not None else policy.ack_timeout_ms
        try:
            # recorded before leasing: a process that dies holding leases is known to
            # have held them in this group (:mod:`brokers.engine.holders`)
            await self.holders.register(topic, app, client_id, lease_ms)
            retried, retry_due = None, 0
            if granted > 0:
                retried, retry_due = await self._lease_retries(
                    info, policy, granted, lease_ms, client_id
                )
            if retried is not None:
                result = retried
            else:
                result = await self.shared.lease(
                    info,
                    policy,
                    tuple(range(info.partitions)),  # every broker serves push consumers
                    count=granted,
                    owner=self.holders.owner(owner),
                    address=address or "",
                    client_id=client_id,
                    args=self.shared.args(
                        info, policy, lease_ms, start if client_id else "earliest"
                    ),
                )
                if retry_due > 0 and not result.found:  # a retry backing off
                    known = result.retry_after_ms
                    result.retry_after_ms = retry_due if known is None else min(known, retry_due)
        except BaseException:
            if policy.rate_limit:
                with contextlib.suppress(Exception):
                    await self.gate.refund_consume(policy, granted)
            raise
        delivered = sum(d.count for d in result.deliveries)
        await self.gate.refund_consume(policy, granted - delivered)
        if delivered:
            self.counters.record(
                topic=topic,
                app=app,
                broker=self.broker_id,
                consumed=delivered,
                consumed_bytes=sum(len(d.record) for d in result.deliveries),
            )
        return result

    async def _lease_retries(
        self,
        info: TopicInfo,
        policy: ConsumerPolicyInfo,
        count: int,
        lease_ms: int,
        member: str | None,
    ) -> tuple[Lease | None, int]:
        """Due messages of the consumer's retry stores (:meth:`_retry_stores`: copies a
        console or API resend put there, dead letters resent, a broadcast client's own
        retries), leased first as a fetch of JMQ4 or HTTP-MQ does: (the lease — partition
        :data:`RETRY_PARTITION`, each delivery's index its retry id — or None, when the
        earliest retry left is due if none was, 0 if none is left). A store is asked
        only when :class:`~brokers.engine.retry_presence.RetryPresence` says one may be
        due: on the common path this awaits nothing."""
        code, app = info.code, policy.app
        leased, due = await lease_first_due(
            self.retry_presence,
            self._retry_stores(code, app, member),
            code,
            now_ms=self.now_ms(),
            lease_ms=lease_ms,
            max_items=count,
            policy=self._retry_for(policy),
            holder=self.holders.id,  # handed on at once if this process dies
        )
        if not leased:
            return None, due or 0
        return Lease(code, app, RETRY_PARTITION, _retry_deliveries(leased), more=True), 0

    async def _settle_retries(
        self, topic: str, app: str, ids: Sequence[int], mode: str, member: str | None = None
    ) -> int:
        """:meth:`settle` (``ack``), :meth:`fail` (``fail``) or :meth:`release` of
        deliveries from the consumer's retry stores (partition :data:`RETRY_PARTITION`;
        retry ids are the group's, so each is in one store only): acked ones leave it,
        failed ones back off (or go to the group's dead letters past the policy's
        ``err_times``), released ones are due again at once."""
        _, policy = self._group_policy(topic, app)
        ids = sorted(set(ids))
        if mode == "release":
            stores = self._retry_stores(topic, app, member)
            return sum([await store.retry_now(ids, now_ms=self.now_ms()) for store in stores])
        done, _ = await self._settle_retry_ids(
            topic,
            app,
            member,
            ids,
            ok=mode == "ack",
            now_ms=self.now_ms(),
            policy=self._retry_for(policy),
        )
        return done

    def _group_policy(self, topic: str, app: str) -> tuple[TopicInfo, ConsumerPolicyInfo]:
        info = self.group_topic(topic)
        snapshot = self._catalog()
        policy = snapshot.consumer(topic, app)
        if policy is None and topic not in snapshot.topics:  # an implicit DLQ
            parent = dead_letter_parent(snapshot, topic)
            if parent is not None:
                policy = snapshot.consumer(parent.code, app)
        if policy is None:  # a consumer whose policy went away still settles what it holds
            policy = ConsumerPolicyInfo(name=f"{app}.{topic}", topic=topic, app=app)
        return info, policy

    async def settle(
        self,
        topic: str,
        app: str,
        partition: int,
        indexes: Sequence[int],
        *,
        client_id: str | None = None,
    ) -> int:
        """Settle leased deliveries for good (acked); unknown or settled ones are ignored.
        One script call whatever the number of indexes; how many were settled now (0
        when Redis was unreachable: the ack is kept and made again once it answers,
        :mod:`brokers.engine.kept_settles`)."""
        return await self._settle_or_keep("ack", topic, app, partition, indexes, client_id) or 0

    async def release(
        self,
        topic: str,
        app: str,
        partition: int,
        indexes: Sequence[int],
        *,
        client_id: str | None = None,
        unread: bool = False,
    ) -> int:
        """Leased deliveries go back, due at once and marked redelivered (their consumer
        went away: not a failed attempt, but their next delivery counts); with ``unread``,
        deliveries no consumer was handed (read ahead, then not needed) go back as they
        were before that lease. Kept and made again when Redis was unreachable (0), as
        :meth:`settle`."""
        mode = "unread" if unread else "release"
        return await self._settle_or_keep(mode, topic, app, partition, indexes, client_id) or 0

    async def _settle_or_keep(
        self,
        mode: str,
        topic: str,
        app: str,
        partition: int,
        indexes: Sequence[int],
        client_id: str | None,
    ) -> int | None:
        """:meth:`_settle_now`; None when Redis was unreachable: the settle is kept and
        made again once it answers (:mod:`brokers.engine.kept_settles`)."""
        try:
            return await self._settle_now(mode, topic, app, partition, indexes, client_id)
        except MISSED:
            self.kept_settles.keep(mode, topic, app, partition, indexes, client_id)
            return None

    async def _settle_now(
        self,
        mode: str,
        topic: str,
        app: str,
        partition: int,
        indexes: Sequence[int],
        client_id: str | None,
    ) -> int:
        """``ack``, ``release`` or ``unread`` (released as never handed out) ``indexes``
        of the group partition; how many changed."""
        if partition == RETRY_PARTITION:
            return await self._settle_retries(
                topic, app, indexes, "ack" if mode == "ack" else "release", client_id
            )
        info, policy = self._group_policy(topic, app)
        return await self.shared.settle(
            info, policy, partition, indexes, mode=mode, client_id=client_id
        )

    async def _settle_kept(
        self,
        mode: str,
        topic: str,
        app: str,
        partition: int,
        indexes: Sequence[int],
        client_id: str | None,
    ) -> int:
        """A kept settle made again; a release also announced when it changed nothing
        (it may have landed the first time, its announcement not)."""
        changed = await self._settle_now(mode, topic, app, partition, indexes, client_id)
        if mode in AVAILABLE_AGAIN and not changed:
            await announce(self.redis, self.group_topic(topic).code, partition)
        return changed

    async def return_unread(
        self, topic: str, app: str, deliveries: Sequence[Delivery], *, client_id: str | None = None
    ) -> int:
        """Deliveries leased but never handed to a consumer (read ahead, then not needed) go
        back, due at once: that lease does not count as a delivery, and only those
        delivered before are marked redelivered. Nor does it count as consumed traffic
        or against the consumer's rate limit: both are given back (the traffic in the
        current minute — a read-ahead is held about a second). One call per partition;
        how many went back. A return Redis missed is kept and made again
        (:meth:`release`); its traffic is given back at once, as if it landed (it does
        once Redis answers), its permits only if Redis takes them back now."""
        runs: dict[int, list[Delivery]] = {}
        for d in deliveries:
            runs.setdefault(d.partition, []).append(d)
        n = returned = returned_bytes = 0
        for partition, held in runs.items():
            indexes = [d.index for d in held]
            counted = sum(d.count for d in held)
            back = await self._settle_or_keep("unread", topic, app, partition, indexes, client_id)
            if back is None:  # kept: it lands once Redis answers
                landing = counted
            else:
                n += back
                landing = min(back, counted)  # none of it when the lease was gone already
            if landing:  # what a lease counted
                returned += landing
                returned_bytes += sum(len(d.record) for d in held) * landing // counted
        if returned:
            self.counters.record(
                topic=topic,
                app=app,
                broker=self.broker_id,
                consumed=-returned,
                consumed_bytes=-returned_bytes,
            )
            _, policy = self._group_policy(topic, app)
            with contextlib.suppress(*MISSED):  # the bucket fills again on its own
                await self.gate.refund_consume(policy, returned)
        return n

    async def fail(
        self,
        topic: str,
        app: str,
        partition: int,
        indexes: Sequence[int],
        *,
        client_id: str | None = None,
    ) -> int:
        """A failed attempt: delivered again after the backoff of its attempt, or
        dead-lettered past the topic's ``max_retry_attempts`` (a retry-store delivery: past
        the consumer policy's ``err_times``, into the group's dead letters). Counted as
        the group's consume failures (:meth:`consume_failures`)."""
        if partition == RETRY_PARTITION:
            failed = await self._settle_retries(topic, app, indexes, "fail", client_id)
        else:
            info, policy = self._group_policy(topic, app)
            failed = await self.shared.settle(
                info, policy, partition, indexes, mode="fail", client_id=client_id
            )
        self.counters.failed(topic=topic, app=app, count=failed)
        return failed

    async def retry_here(
        self,
        topic: str,
        app: str,
        delivery: Delivery,
        *,
        owner: str,
        lease_ms: int,
        client_id: str | None = None,
    ) -> int | None:
        """A failed attempt (no ack in time) whose retry goes to the same lessee (VibeMQ
        §7: the same connection while it is connected and subscribed): if ``owner`` still
        holds ``delivery``, it stays leased to it, counted as the next attempt and
        delivery, for the backoff of the failed attempt plus ``lease_ms`` — the lessee
        delivers it again once the backoff is over (asking :meth:`past_ttl` first).
        Returns when that is (engine ms); None when the lease is not ``owner``'s any
        more, the message's TTL is over before then (the lease lapses and expires it, as
        any lease's), or the attempt was the last (then it is dead-lettered, as a failure
        is)."""
        self.counters.failed(topic=topic, app=app, count=1)
        if delivery.partition == RETRY_PARTITION:  # the retry store keeps no lessee: failed
            await self._settle_retries(topic, app, [delivery.index], "fail", client_id)
            return None
        info, policy = self._group_policy(topic, app)
        until = _expires_at(info, delivery)
        if until and until <= self.now_ms():
            return None
        return await self.shared.keep(
            info,
            policy,
            delivery.partition,
            delivery.index,
            owner=self.holders.owner(owner),
            lease_ms=lease_ms,
            client_id=client_id,
            keep_until=until,
        )

    def past_ttl(self, topic: str, delivery: Delivery) -> bool:
        """Whether ``delivery``'s message is past its topic's TTL now: a lessee holding
        it (a retry kept for it) must not hand it out; its lease expires it. False for a
        topic that is gone (its deliveries are dropped as it goes)."""
        try:
            until = _expires_at(self.group_topic(topic), delivery)
        except TopicNotFound:
            return False
        return 0 < until <= self.now_ms()

    async def release_owner(
        self, topic: str, app: str, owner: str, *, client_id: str | None = None
    ) -> int:
        """Everything ``owner`` leased of ``topic`` for ``app`` is due again at once (its
        connection closed); how many leases."""
        info = self.group_topic(topic)
        return await self.shared.release_owner(
            info, app, tuple(range(info.partitions)), self.holders.owner(owner), client_id
        )

    async def _release_held_leases(
        self, info: TopicInfo, app: str, client_id: str | None, owner_prefix: str
    ) -> int:
        """Every unexpired range of the group leased by an owner named ``owner_prefix``…
        (a lease holder that is gone) is due again at once, and so is every retry of the
        group's retry store that holder leased (for any of its connections)."""
        ranges = await self.shared.release_owner(
            info, app, tuple(range(info.partitions)), owner_prefix, client_id, prefix=True
        )
        holder = owner_prefix.removesuffix("/")
        return ranges + await self._release_held_retries(info.code, app, client_id, holder)

    async def expire(self, topic: str) -> int:
        """Expire the messages of a topic with a TTL that no consumer was handed yet (the
        periodic sweep: a queue nobody consumes still sheds them): dead-lettered to the
        topic's DLQ, or counted dropped. How many.

        Every partition and group in one round trip; then nothing is read again before
        the first message left can expire (at most :data:`EXPIRE_RECHECK_MS` later, so a
        group added or moved back meanwhile waits no longer): a sweep of thousands of
        queues costs Redis only for those with something due."""
        info = self.group_topic(topic)
        ttl = info.queue.message_ttl_ms
        if ttl is None:
            return 0
        cids: tuple[str | None, ...] = tuple(self._group_ids(info)) or (None,)
        now = self.now_ms()
        known = self._expire_due.get(topic)
        if known is not None and known[0] == cids and known[1] > now:
            return 0

        results = await asyncio.gather(
            *(self._expire_one(topic, p, c, now, ttl) for p in range(info.partitions) for c in cids)
        )
        due = min(d for _, d in results) - EXPIRE_CLOCK_MARGIN_MS
        if len(self._expire_due) > 2 * len(self._catalog().topics) + 1024:
            topics = self._catalog().topics
            self._expire_due = {t: v for t, v in self._expire_due.items() if t in topics}
        self._expire_due[topic] = (cids, min(due, now + EXPIRE_RECHECK_MS))
        return sum(n for n, _ in results)

    async def join(
        self,
        topic: str,
        app: str,
        member: str,
        *,
        held: bool = False,
        keep_ms: int | None = None,
    ) -> None:
        """A fan-out member of ``app``'s group starts where it joins: at the queue's
        dispatch mark — every message not yet handed to any member, so a message
        published while nobody listened waits for the first subscribers. A member seen
        before keeps what it was handed and did not ack, and skips what was handed to
        the others while it was away ("present at dispatch", vibemq.md §9.1). ``held``:
        it is a connection's of this process — should the process die, it leaves as
        :meth:`leave` with ``keep_ms`` makes it (the holders' sweep)."""
        info = self.group_topic(topic)
        if held:
            await self.holders.hold_member(topic, app, member, keep_ms)
        cid = consumer_id(app, member)
        await keep_progress(self.redis, topic, range(info.partitions), cid)
        for p in range(info.partitions):
            await join_group(self.redis, topic, p, cid)
        await add_member(self.redis, topic, app, member, self.now_ms())

    async def leave(self, topic: str, app: str, member: str, *, keep_ms: int | None = None) -> None:
        """A fan-out member left: its progress is deleted — at once (with its own
        retries), or after ``keep_ms`` unless it joins again first (a durable subscriber
        that may reconnect; its retries wait for it)."""
        info = self.group_topic(topic)
        cid = consumer_id(app, member)
        await self.holders.drop_member(topic, app, member)
        await forget_progress(self.redis, topic, range(info.partitions), cid, after_ms=keep_ms)
        if keep_ms is None:
            await self._retries_of(topic, app, member).drop_own()
            await drop_member(self.redis, topic, app, member)

    async def _leave_for_dead(self, topic: str, app: str, member: str, keep_ms: int | None) -> None:
        """A dead process's fan-out member leaves (the holders' sweep); a topic that is
        gone meanwhile took its progress with it."""
        with contextlib.suppress(TopicNotFound):
            await self.leave(topic, app, member, keep_ms=keep_ms)

    async def members(self, topic: str, app: str) -> list[str]:
        """The fan-out members of ``app``'s group on ``topic`` that have progress: joined
        and not gone for good (a durable member away for less than its keep time counts)."""
        self.group_topic(topic)
        return await group_members(self.redis, topic, app)

    async def _expire_one(
        self, topic: str, p: int, cid: str | None, now: int, ttl: int
    ) -> tuple[int, int]:
        """:meth:`expire` for one partition and group: how many expired, and when the
        next can."""
        gone, due = await expire_records(self.redis, topic, p, cid, now_ms=now, ttl_ms=ttl)
        for d in gone:
            if not await self._dead_letter(topic, cid or "", d, "MessageExpired", 0):
                await count_dropped(self.redis, topic, p, d.count)
        return len(gone), due

    async def group_stats(
        self, topic: str, app: str, *, client_id: str | None = None
    ) -> GroupStats:
        """The numbers of ``app``'s consumer group on ``topic`` over every partition:
        backlog (stored − acked), of which in flight and waiting for a retry, and the
        topic's dropped count — the same numbers whatever protocol produced or consumed."""
        info = self.group_topic(topic)
        return await group_stats(
            self.redis, topic, range(info.partitions), consumer_id(app, client_id), self.now_ms()
        )

    async def queue_stats(self, topic: str) -> GroupStats:
        """:meth:`group_stats` of the topic's slowest clustering group (the backlog its
        max size bounds); the whole stored count while it has no group. A fan-out queue
        counts what no member was handed yet (what its max size bounds) and, in flight,
        what some member was handed and not every member settled
        (:mod:`~brokers.engine.fan_out_stats`)."""
        info = self.group_topic(topic)
        known = topic in self._catalog().topics
        ids = self._group_ids(info) if known else []
        parts = range(info.partitions)
        if known and info.type != "broadcast" and info.queue.delivery_mode in FAN_OUT:
            apps = sorted({c.app for c in self._catalog().consumers_of(topic)})
            listed = await members_of_groups(self.redis, [(topic, app) for app in apps])
            cids = [consumer_id(app, m) for app, ms in zip(apps, listed, strict=True) for m in ms]
            return await fan_out_stats(self.redis, topic, parts, cids)
        if not ids:
            return await group_stats(self.redis, topic, parts, None, self.now_ms())
        stats = [await group_stats(self.redis, topic, parts, g, self.now_ms()) for g in ids]
        return max(stats, key=lambda st: st.backlog)

    async def purge(self, topic: str) -> None:
        """Delete a topic's messages and its groups' progress (VibeMQ deleteQueue)."""
        info = self.group_topic(topic)
        ids = {c.app for c in self._catalog().consumers_of(topic)}
        await purge_partitions(self.redis, topic, range(info.partitions), ids)

    async def erase_topic(self, topic: str) -> int:
        """Delete every key of a deleted topic (:mod:`brokers.engine.erase`): messages,
        every group's progress, retries and dead letters, transactions, delayed messages
        and group bookkeeping, whichever apps left them. For a topic no client may use any
        more (no policies): the catalog need not name it. Returns how many keys went."""
        return await erase_topic(self.redis, topic)

    async def erase_group(self, topic: str, app: str) -> int:
        """Delete every key of a deleted consumer group (:mod:`brokers.engine.erase`): its
        progress on each partition (and every broadcast client's), retries and dead
        letters, resend lists, registry and assignments. A policy created later for the
        app starts at its start position. Returns how many keys went."""
        return await erase_group(self.redis, topic, app)


def _expires_at(info: TopicInfo, delivery: Delivery) -> int:
    """When ``delivery``'s message is past its topic's TTL (engine ms; 0: it has none)."""
    ttl = info.queue.message_ttl_ms
    return 0 if ttl is None else record_store_time(delivery.record) + ttl


def _retry_deliveries(leased: list[tuple[int, int, int, int, int, bytes]]) -> list[Delivery]:
    """Leased retries as deliveries, one by one: partition :data:`RETRY_PARTITION`, the
    retry id as the index, from where they were stored, counted as the next attempt."""
    return one_by_one(
        Delivery(
            RETRY_PARTITION,
            rid,
            n,
            with_position(record, RETRY_PARTITION, rid),
            origin=(partition, index),
            attempts=attempts + 1,
            redelivered=True,
        )
        for rid, partition, index, n, attempts, record in leased
    )
