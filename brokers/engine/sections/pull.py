"""Pull consumers (JMQ4, HTTP-MQ): fetch under a partition lock, acks and commits, offsets,
progress, broadcast clients, operator resends, and reads of consumers keeping their own
position.

A section of the :class:`~brokers.engine.engine.Engine` facade (a mixin on its shared state).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from brokers.engine import ack as ack_mod
from brokers.engine import offsets as offsets_mod
from brokers.engine import overview
from brokers.engine import resend as resend_mod
from brokers.engine.ack import CommitCall, commit_illegal, contiguous
from brokers.engine.catalog import (
    ConsumerPolicyInfo,
    TopicInfo,
)
from brokers.engine.consume import release, release_held
from brokers.engine.counters import FAILED, HELD_BACK, MOVED
from brokers.engine.erase import erase_clients
from brokers.engine.errors import (
    ConsumerClientNotAllowed,
    ConsumerPaused,
    InvalidMessage,
    PartitionNotFound,
    RateLimited,
    SpanTooLarge,
)
from brokers.engine.fetch import FetchRequest, Piggyback
from brokers.engine.groups import members as group_members
from brokers.engine.keys import RETRY_PARTITION, consumer_id
from brokers.engine.model import (
    AckResult,
    AckStatus,
    CommitRequest,
    CommitResult,
    Delivery,
    FetchResult,
    FetchStatus,
    PartitionProgress,
    PullResult,
    RetryType,
)
from brokers.engine.notify import announce
from brokers.engine.overview import GroupLag, TopicRate
from brokers.engine.read import indexes_at_times, read_chunks, read_range
from brokers.engine.sections.base import ACTIVE_CLIENT_MS, EngineBase
from brokers.engine.unbatch import one_by_one, split_batches

IDLE_CLIENTS_BATCH = 1_000
"""Most idle broadcast clients of one consumer forgotten per call."""
RECONSUME_MAX = 100_000
"""Most messages one re-consume of a time span copies into a group's retry store."""
RECONSUME_CHUNK = 1_000
"""Messages read and copied per round trip of a re-consume."""
_RESENDS_WITH = (FetchStatus.FOUND, FetchStatus.NO_NEW_MSG, FetchStatus.CORRECTED)
"""Fetch outcomes a combined request hands queued resends out with."""


class PullSection(EngineBase):
    """Pull consumers (JMQ4, HTTP-MQ)."""

    async def consume_read(
        self,
        topic: str,
        app: str,
        partition: int,
        start: int,
        count: int = 32,
        *,
        address: str | None = None,
        messages: bool = False,
    ) -> list[Delivery]:
        """:meth:`read` for a consumer of ``app`` that keeps its own position (JMQ4
        FETCH_PARTITION_MESSAGE, zbus pub/sub): past the gate (no policy or a blacklisted
        ``address``: refused; paused: ConsumerPaused; over the rate limit: RateLimited,
        and at most as many records as there are permits). ``messages``: one delivery
        per message from ``start`` on (batches as their items, bodies inflated: see
        :mod:`brokers.engine.unbatch`) rather than the records as stored."""
        policy = self.gate.consumer(topic, app, address)
        if policy.paused:
            raise ConsumerPaused(f"consumer {policy.name} is paused")
        self._partition(self.topic(topic), partition)
        granted = await self.gate.admit_consume(policy, max(1, count))
        got = await read_range(self.redis, topic, partition, start, granted)
        if policy.rate_limit:
            got = got[:granted]
            await self.gate.refund_consume(policy, granted - len(got))
        return one_by_one(got, ((start, 2**63),)) if messages else got

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
        held: bool = False,
        max_bytes: int = 0,
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

        ``held``: the lock is held for a connection of this process (JMQ4), not for a
        client that any process may serve next (HTTP-MQ); if the process dies, another
        hands it on (:mod:`brokers.engine.holders`). Pass the same to :meth:`ack` and
        :meth:`unlock`.

        ``max_bytes`` > 0: the batch stops before the record that would take its records
        past this many bytes (at least one record goes): what the caller's response has
        room for, so nothing is read, locked and counted that it cannot send.
        """
        return await self._gated_fetch(
            topic,
            app,
            count=count,
            ack_timeout_ms=ack_timeout_ms,
            long_poll_ms=long_poll_ms,
            owner=owner,
            client_id=client_id,
            address=address,
            start_position=start_position,
            reported_address=reported_address,
            held=held,
            max_bytes=max_bytes,
        )

    async def commit_and_fetch(
        self,
        topic: str,
        app: str,
        *,
        commit: CommitRequest | None,
        resends: int = 32,
        owner: str = "",
        client_id: str | None = None,
        address: str = "",
        start_position: str | None = None,
        reported_address: str | None = None,
    ) -> PullResult:
        """HTTP-MQ's /mq/message (http-mq.md §9): :meth:`commit` ``commit`` (if any), then
        :meth:`fetch` (the policy's batch size and ack timeout), then :meth:`take_resends`
        (up to ``resends``) unless the fetch was refused or found every partition with
        messages locked (NO_PARTITION). On a single Redis the three are ONE script call.
        An ack index the fetch finds outside its partition (retention took what it had not
        acked) is moved and reported: CORRECTED, with the partition locked over nothing
        (``corrected_from`` → ``ack_index``, http-mq.md OFFSET_ILLEGAL) — no batch is
        read under that lock, so none counts as consumed, or as failed if never acked.

        A commit naming no partition of the topic or illegal offsets is not run: its
        reason is the result's ``commit_error`` and the fetch goes on (http-mq.md §7). A
        fetch the gate refuses (blacklisted, paused, rate limited) still commits."""
        info = self.topic(topic)
        call = None
        rejected = None
        if commit is not None:
            policy = self._consumer(topic, app)
            self._broadcast(info, policy, client_id)
            try:
                call = self._commit_call(info, app, commit, client_id)
            except (PartitionNotFound, InvalidMessage) as exc:
                rejected = str(exc)
        resend_key = resend_mod.list_key(topic, app, client_id)
        want = (resend_key, resends) if resends > 0 else None
        extra = Piggyback(call, want)
        fetched = await self._gated_fetch(
            topic,
            app,
            owner=owner,
            client_id=client_id,
            address=address,
            start_position=start_position,
            reported_address=reported_address,
            extra=extra,
            report_correction=True,
        )
        await extra.commit_alone(self.redis)  # the gate refused the fetch: it did not run
        self._count_move(topic, app, extra.committed)
        taken: list[Delivery] = []
        if extra.popped is not None:  # popped entries are handed out whatever happened
            taken = await resend_mod.read_popped(self.redis, topic, extra.popped, resend_key)
        elif resends > 0 and fetched.status in _RESENDS_WITH:
            taken = await resend_mod.take(self.redis, topic, app, client_id, resends)
        return PullResult(extra.committed, fetched, tuple(taken), rejected)

    async def _gated_fetch(
        self,
        topic: str,
        app: str,
        *,
        count: int = 0,
        ack_timeout_ms: int = 0,
        long_poll_ms: int = 0,
        owner: str,
        client_id: str | None,
        address: str,
        start_position: str | None,
        reported_address: str | None,
        extra: Piggyback | None = None,
        held: bool = False,
        report_correction: bool = False,
        max_bytes: int = 0,
    ) -> FetchResult:
        """:meth:`fetch` past the gate, with ``extra`` riding on the first look;
        ``report_correction``: :attr:`FetchRequest.report_correction`."""
        info = self.topic(topic)
        policy_or_refusal = self._consumer_gate(topic, app, address)
        if isinstance(policy_or_refusal, FetchResult):
            return policy_or_refusal
        policy = policy_or_refusal
        self._broadcast(info, policy, client_id)
        try:
            await self.gate.admit_fetch(policy)
        except RateLimited as exc:
            return FetchResult(
                FetchStatus.RATE_LIMITED, topic, retry_after_ms=self.now_ms() + exc.retry_after_ms
            )
        if ack_timeout_ms <= 0:
            ack_timeout_ms = policy.ack_timeout_ms
        if held:  # recorded before the lock is taken, for the holders' sweep
            await self.holders.register(topic, app, client_id, ack_timeout_ms)
            owner = self.holders.owner(owner)
        result, consumed = await self._fetch(
            info,
            policy,
            count if count > 0 else policy.batch_size,
            ack_timeout_ms,
            long_poll_ms,
            owner,
            client_id,
            reported_address or address,
            start_position,
            extra,
            holder=self.holders.id if held else None,
            report_correction=report_correction,
            max_bytes=max_bytes,
            regate=lambda: self._consumer_gate(topic, app, address),
        )
        await self.gate.charge_consume(policy, consumed)
        return result

    def _consumer_gate(
        self, topic: str, app: str, address: str
    ) -> ConsumerPolicyInfo | FetchResult:
        """The consumer policy that lets ``app`` fetch ``topic`` from ``address`` now, or
        the result refusing it (blacklisted, paused); a topic or policy that is gone
        raises (the gate's TopicNotFound, ConsumerNotFound). A long poll asks again before
        each look (:attr:`FetchRequest.regate`)."""
        try:
            policy = self.gate.consumer(topic, app, address)
        except ConsumerClientNotAllowed:
            return FetchResult(FetchStatus.BLACKLISTED, topic)
        if policy.paused:
            return FetchResult(FetchStatus.PAUSED, topic)
        return policy

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
        extra: Piggyback | None = None,
        *,
        holder: str | None = None,
        report_correction: bool = False,
        max_bytes: int = 0,
        regate: Callable[[], ConsumerPolicyInfo | FetchResult] | None = None,
    ) -> tuple[FetchResult, int]:
        """The fetch, and the messages it took (what the gate charges); retries it
        leases are recorded under ``holder``; a long poll asks ``regate`` before each look
        after its first (:attr:`FetchRequest.regate`)."""
        topic, app = info.code, policy.app
        if client_id:
            await offsets_mod.seen_client(self.redis, topic, app, client_id, self.now_ms())
        req = FetchRequest(
            topic=info,
            app=app,
            policy=policy,
            partitions=self.readable_partitions(info),
            count=count,
            ack_timeout_ms=ack_timeout_ms,
            owner=owner,
            client_id=client_id,
            address=address,
            sequential=info.type == "sequential" or policy.sequential,
            init=start_position or (policy.start_position if client_id else "earliest"),
            holder=holder,
            report_correction=report_correction,
            max_bytes=max_bytes,
            regate=regate,
        )
        result = await self._fetcher.fetch(req, long_poll_ms, extra)
        if result.lapsed:  # an earlier batch's lock ran out unacked: failed, like a nack
            self.counters.failed(topic=topic, app=app, count=result.lapsed)
        if result.status is FetchStatus.CORRECTED and result.corrected_from > result.ack_index:
            self.counters.moved(topic=topic, app=app)  # reported past the partition's end
        consumed = 0
        if result.found:
            size = 0
            for d in result.messages:  # one pass: this runs per fetch, over every message
                consumed += d.count
                size += len(d.record)
            self.counters.record(
                topic=topic, app=app, broker=self.broker_id, consumed=consumed, consumed_bytes=size
            )
        return result, consumed

    def _held_owner(self, owner: str, held: bool) -> str:
        """``owner`` as the lock stores it: under this process's holder id when ``held``."""
        return self.holders.owner(owner) if held and owner else owner

    async def _release_held_locks(
        self, info: TopicInfo, app: str, client_id: str | None, owner_prefix: str
    ) -> int:
        """Drop the unexpired partition locks of a gone holder (``owner_prefix``…)."""
        return await release_held(
            self.redis,
            info.code,
            range(info.partitions),
            consumer_id(app, client_id),
            owner_prefix,
            now_ms=self.now_ms(),
        )

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
        held: bool = False,
    ) -> AckResult:
        """JMQ4 COMMIT_ACK of a contiguous run of indexes on one partition.

        Partition 32767 acks retry ids. A ``retry_type`` other than NONE copies the
        messages to the retry store and still acks (a sequential topic, a policy with retry
        off and no force-ack, or a run the topic's send-back limit does not let through
        only releases the lock: the run is delivered again).
        ``held`` as the fetch that took the lock had it.
        """
        owner = self._held_owner(owner, held)
        info = self.topic(topic)
        policy = self._consumer(topic, app)
        self._broadcast(info, policy, client_id)
        start, end = contiguous(indexes)
        now = self.now_ms()
        if retry_type is not RetryType.NONE:  # the consumer failed them
            self.counters.failed(topic=topic, app=app, count=min(end - start, 10_000))
        if partition == RETRY_PARTITION:
            return await self._ack_retries(
                topic, app, policy, start, end, retry_type, now, reason, client_id
            )
        self._partition(info, partition)
        cid = consumer_id(app, client_id)
        retry_ids: tuple[int, ...] = ()
        if retry_type is not RetryType.NONE:
            sequential = info.type == "sequential" or policy.sequential
            over = (
                not sequential
                and policy.retry
                and not await self.gate.admit_send_back(topic, end - start)
            )
            if over:
                self.counters.held_back(topic=topic, app=app, count=min(end - start, 10_000))
            if sequential or over or not (policy.retry or self.force_ack):
                await release(self.redis, topic, partition, cid, token, owner)
                ack = await offsets_mod.ack_index(self.redis, topic, partition, cid)
                return AckResult(AckStatus.REDELIVER, ack)
            if policy.retry:
                retry_ids, _ = await self._copy_to_retry(
                    topic,
                    app,
                    partition,
                    start,
                    end,
                    now,
                    reason or retry_type.name,
                    member=client_id,  # a broadcast client's retry is its own
                )
        status, ack = await ack_mod.ack_range(
            self.redis, topic, partition, cid, start, end, owner=owner, token=token, now_ms=now
        )
        return AckResult(status, ack, retry_ids)

    async def _copy_to_retry(
        self,
        topic: str,
        app: str,
        partition: int,
        start: int,
        end: int,
        now: int,
        reason: str,
        *,
        due_ms: int | None = None,
        member: str | None = None,
        whole_batches: bool = False,
    ) -> tuple[tuple[int, ...], int]:
        """Copy the messages of ``[start, end)`` into the group's retry store (a broadcast
        client's own, with ``member``), due at ``due_ms`` (default: after the base
        backoff): (their retry ids — a batch record's items each have one, as the store
        keeps them one by one — where the records copied end; ``start`` when none was:
        nothing stored there any more). Of a JMQ4 batch record only the items inside
        ``[start, end)`` are copied (a consumer failed those, and acked the others), unless
        ``whole_batches``: a batch record that starts before ``end`` is then copied whole.
        Read and stored one capped read (:func:`read_chunks`) at a time, so a range of
        large messages is never held whole."""
        store = self._retries_of(topic, app, member)
        due = now + self.retry_policy.base_ms if due_ms is None else due_ms
        ids: list[int] = []
        pos = start
        runs = None if whole_batches else ((start, end),)
        async for taken in read_chunks(self.redis, topic, partition, start, end):
            items = split_batches([(partition, d.index, d.count, d.record) for d in taken], runs)
            ids += await store.add(items, now_ms=now, due_ms=due, reason=reason)
            pos = taken[-1].end
        return tuple(ids), pos

    async def reconsumers(
        self, topic: str, app: str, client_id: str | None = None
    ) -> list[str | None]:
        """Whose retries a re-consume fills: a clustering consumer's group (None; no
        ``client_id`` allowed); a broadcast consumer's ``client_id``, or without one,
        every client it registered (each has its progress, so each gets the span); on a
        fan-out queue, the member ``client_id``, or without one each member (the group
        itself while it has none: its pull consumers). InvalidMessage for a broadcast
        consumer that has no client yet, or a ``client_id`` that is no member."""
        info, policy = self.topic(topic), self._consumer(topic, app)
        if client_id is not None and self._by_members(info, policy):
            if client_id not in await group_members(self.redis, topic, app):
                raise InvalidMessage(f"{client_id} is no member of {policy.name} on {topic}")
        elif client_id is not None or not self._by_broadcast(info, policy):
            self._broadcast(info, policy, client_id)
        clients = await self._each_client(info, policy, client_id, group_too=False)
        if not clients:
            raise InvalidMessage(f"{policy.name} consumes by broadcast and has no client yet")
        return clients

    async def stored_spans(
        self, topic: str, *, from_ms: int, to_ms: int
    ) -> dict[int, tuple[int, int]]:
        """Per partition, the indexes ``[first, end)`` of the messages stored in the time
        span ``[from_ms, to_ms)`` (partitions with none left out), in one round trip."""
        info = self.topic(topic)
        if to_ms <= from_ms:
            raise InvalidMessage("the span ends before it starts")
        parts = range(info.partitions)
        found = await indexes_at_times(self.redis, topic, parts, (from_ms, to_ms))
        return {
            p: (first, end) for p, (first, end) in zip(parts, found, strict=True) if end > first
        }

    async def reconsume_spans(
        self, topic: str, app: str, *, from_ms: int, to_ms: int, clients: int = 1
    ) -> dict[int, tuple[int, int]]:
        """What a re-consume of the time span ``[from_ms, to_ms)`` copies: per partition,
        the indexes ``[first, end)`` of the messages stored then (partitions with none
        left out). SpanTooLarge, before anything is copied, when that is more than
        :data:`RECONSUME_MAX` messages for the number of ``clients`` it is copied for
        (:meth:`reconsumers`; an offset reset re-delivers any number)."""
        self._consumer(topic, app)
        spans = await self.stored_spans(topic, from_ms=from_ms, to_ms=to_ms)
        total = sum(end - first for first, end in spans.values()) * max(1, clients)
        if total > RECONSUME_MAX:
            raise SpanTooLarge(
                f"{total} messages would be copied for that span; at most {RECONSUME_MAX} are"
                " re-consumed at once: choose a shorter span, or reset the offsets"
            )
        return spans

    async def reconsume(
        self,
        topic: str,
        app: str,
        partition: int,
        first: int,
        end: int,
        *,
        client_id: str | None = None,
    ) -> int:
        """Copy the messages ``[first, end)`` of ``partition`` (a span of
        :meth:`reconsume_spans`) into the consumer group's retry store — a broadcast
        consumer's or a fan-out queue's: into client or member ``client_id``'s own — due now: every consumer of the group (that
        client) gets them again, whatever its protocol, without its progress moving. Read
        and copied :data:`RECONSUME_CHUNK` at a time, each chunk from where the last
        record copied ended (a batch record crossing a chunk's end is copied once, with
        that chunk); what retention took meanwhile ends it. How many messages were copied
        (a batch record's items each)."""
        info, policy = self.topic(topic), self._consumer(topic, app)
        if not (client_id and self._by_members(info, policy)):  # a member: its own
            self._broadcast(info, policy, client_id)
        copied, pos = 0, first
        while pos < end:
            now = self.now_ms()
            ids, pos = await self._copy_to_retry(
                topic,
                app,
                partition,
                pos,
                min(end, pos + RECONSUME_CHUNK),
                now,
                "Reconsume",
                due_ms=now,
                member=client_id,
                whole_batches=True,  # the next chunk starts where this batch ends
            )
            if not ids:  # trimmed by retention since the span was taken
                return copied
            copied += len(ids)
        return copied

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
        member: str | None,
    ) -> AckResult:
        """An ack of retry ids: in whichever of the consumer's stores each is."""
        done, dead = await self._settle_retry_ids(
            topic,
            app,
            member,
            range(start, min(end, start + 10_000)),
            ok=retry_type is RetryType.NONE,
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
        request = CommitRequest(partition, offset, next_offset, lock_time, force)
        result = await self._commit_call(info, app, request, client_id).run(self.redis)
        self._count_move(topic, app, result)
        return result

    def _count_move(self, topic: str, app: str, result: CommitResult | None) -> None:
        """Count a commit that moved the consumer's offset by a client's forceAck."""
        if result is not None and result.moved_from >= 0:
            self.counters.moved(topic=topic, app=app)

    def _commit_call(
        self, info: TopicInfo, app: str, commit: CommitRequest, client_id: str | None
    ) -> CommitCall:
        self._partition(info, commit.partition)
        if commit_illegal(commit.offset, commit.next_offset, commit.lock_time, commit.force):
            raise InvalidMessage(
                f"ack illegal {commit.partition}:{commit.offset},{commit.next_offset}"
            )
        return CommitCall.of(
            info.code,
            commit.partition,
            consumer_id(app, client_id),
            offset=commit.offset,
            next_offset=commit.next_offset,
            lock_time=commit.lock_time,
            force=commit.force,
            now_ms=self.now_ms(),
        )

    async def unlock(
        self,
        topic: str,
        app: str,
        partition: int,
        *,
        token: int | None = None,
        client_id: str | None = None,
        owner: str = "",
        held: bool = False,
        unsent: Sequence[Delivery] = (),
    ) -> bool:
        """Release a partition lock without committing: only if ``token`` still holds it;
        without a token, only if ``owner`` (the ``owner`` of the fetch that took it, with
        its ``held``) holds it; with neither, whoever holds it. Wakes long polls on the
        partition. ``unsent``: what the fetch read under the lock that its consumer was
        never sent (a response with no room left) — not consumed after all, so not
        counted as consumed traffic nor charged to the rate limit."""
        owner = self._held_owner(owner, held)
        info = self.topic(topic)
        self._partition(info, partition)
        cid = consumer_id(app, client_id)
        released = await release(self.redis, topic, partition, cid, token, owner)
        if released:
            await self._not_consumed(topic, app, unsent)
        return released

    async def unlock_retries(
        self,
        topic: str,
        app: str,
        ids: Sequence[int],
        *,
        client_id: str | None = None,
        unsent: Sequence[Delivery] = (),
    ) -> int:
        """Retries this process fetched for a connection (``held``) that closes without
        acking them: due again at once — those it still holds (not acked, nor leased
        again since its lease ended), as :meth:`unlock` does a partition's lock; how
        many. ``unsent`` as for :meth:`unlock`: the retries among ``ids`` the consumer
        was never sent."""
        info, policy = self.topic(topic), self._consumer(topic, app)
        self._broadcast(info, policy, client_id)
        if not ids:
            return 0
        released = await self._release_held_retries(topic, app, client_id, self.holders.id, ids)
        if released:
            await self._not_consumed(topic, app, unsent)
        return released

    async def _not_consumed(self, topic: str, app: str, unsent: Sequence[Delivery]) -> None:
        """Take back what a fetch counted and charged for deliveries it never sent."""
        count = sum(d.count for d in unsent)
        if not count:
            return
        size = sum(len(d.record) for d in unsent)
        self.counters.record(
            topic=topic, app=app, broker=self.broker_id, consumed=-count, consumed_bytes=-size
        )
        await self.gate.refund_consume(self._consumer(topic, app), count)

    async def reset_offsets(
        self,
        topic: str,
        app: str,
        *,
        position: str | int | None = None,
        timestamp_ms: int | None = None,
        partition: int | None = None,
        client_id: str | None = None,
        by_client: bool = False,
    ) -> dict[int, int]:
        """Set the ack index: ``position`` 'earliest' | 'latest' | an index, or the first
        message stored at/after ``timestamp_ms``; one partition or all. For a broadcast
        consumer without ``client_id`` every registered client is reset; on a fan-out
        queue the group and each member. Returns the new ack index per partition (of the
        last client reset).

        ``by_client``: the consumer's own client set it (JMQ4 COMMIT_ACK_INDEX), not an
        approved operation: each partition whose ack index it changed counts as an
        offset move (the console's offset-move alert), whatever the protocol."""
        info = self.topic(topic)
        policy = self._consumer(topic, app)
        parts = list(range(info.partitions)) if partition is None else [partition]
        for p in parts:
            self._partition(info, p)
        if (position is None) == (timestamp_ms is None):
            raise InvalidMessage("give exactly one of position and timestamp_ms")
        clients = await self._each_client(info, policy, client_id)
        targets: list[int | str] = (
            [position] * len(parts)
            if position is not None
            else [  # every partition's index at that time: one round trip
                at
                for (at,) in await indexes_at_times(
                    self.redis,
                    topic,
                    parts,
                    (timestamp_ms,),  # type: ignore[arg-type]
                )
            ]
        )
        result: dict[int, int] = {}
        for cid_client in clients:  # each client's partitions in one round trip
            cid = consumer_id(app, cid_client)
            pins = [(topic, p, cid, target) for p, target in zip(parts, targets, strict=True)]
            if by_client:
                moves = await offsets_mod.move_acks(self.redis, pins)
                acks = [new for new, _ in moves]
                changed = sum(1 for new, before in moves if before is not None and new != before)
                self.counters.moved(topic=topic, app=app, count=changed)
            else:
                acks = await offsets_mod.set_acks(self.redis, pins)
            result.update(zip(parts, acks, strict=True))
        # a rewind makes messages servable: consumers that found nothing look again now,
        # not at their timer (one announcement for a topic's every partition)
        await announce(self.redis, topic, parts[0] if len(parts) == 1 else None)
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

    async def register_consumers(
        self, consumers: Sequence[tuple[str, str, str]]
    ) -> dict[tuple[str, str], dict[int, int]]:
        """:meth:`register_consumer` (clustering) for many ``(topic, app, start)`` at once:
        every partition of every one is pinned in ONE pipelined Redis round trip, so
        approving a fleet of consumers costs one round trip, not one per partition. Each
        must be in the catalog: TopicNotFound / ConsumerNotFound before anything is
        written. Returns each ``(topic, app)``'s ``{partition: ack index}``."""
        pins: list[tuple[str, int, str, str]] = []
        owners: list[tuple[str, str]] = []
        for topic, app, start in consumers:
            info = self.topic(topic)
            self._consumer(topic, app)
            cid = consumer_id(app, None)
            for p in range(info.partitions):
                pins.append((topic, p, cid, start))
                owners.append((topic, app))
        acks = await offsets_mod.set_acks_if_missing(self.redis, pins)
        result: dict[tuple[str, str], dict[int, int]] = {}
        for owner, pin, ack in zip(owners, pins, acks, strict=True):
            result.setdefault(owner, {})[pin[1]] = ack
        return result

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

    async def groups_progress(
        self, groups: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], list[PartitionProgress]]:
        """:meth:`progress` (every partition, the group's own) of many consumer groups
        ``(topic, app)`` in one round trip; groups of topics not in the catalog are left
        out."""
        known = self._catalog().topics
        wanted = [(t, a) for t, a in dict.fromkeys(groups) if t in known]
        readers = [(t, range(known[t].partitions), consumer_id(a, None)) for t, a in wanted]
        rows = await offsets_mod.progress_many(self.redis, readers, self.now_ms())
        return dict(zip(wanted, rows, strict=True))

    async def group_lags(
        self, groups: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], GroupLag]:
        """Lag and oldest unacked message of many consumer groups ``(topic, app)`` — what
        :meth:`progress` sums for one — in two round trips whatever their number (one
        more with broadcast consumers among them, one more with fan-out queues: such a
        consumer's figures are its slowest client's or member's, see
        :meth:`client_lags`); groups of topics not in the catalog are left out."""
        out: dict[tuple[str, str], GroupLag] = {}
        for key, clients in (await self.client_lags(groups)).items():
            for lag in clients.values():
                out[key] = lag if key not in out else overview.worst(out[key], lag)
        return out

    async def client_lags(
        self, groups: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], dict[str | None, GroupLag]]:
        """For each consumer group ``(topic, app)`` in the catalog, the lag of each of
        its progresses: the group's own (key None) for a clustering consumer; for a
        broadcast consumer, each client's — those seen in the last ``ACTIVE_CLIENT_MS``,
        or every registered one when none was (:func:`offsets.lag_clients`); for a
        fan-out queue, each member's. A broadcast consumer without a client and a fan-out
        queue without a member have the group's own (nothing consumed: all is behind).
        Two round trips, plus one each for broadcast consumers and fan-out queues."""
        known = [
            (t, a, info) for t, a in groups if (info := self.catalog.topics.get(t)) is not None
        ]
        clients = await self._progress_clients(known)
        refs = [
            overview.GroupRef(topic, app, info.partitions, client_id=client)
            for topic, app, info in known
            for client in clients.get((topic, app)) or (None,)
        ]
        out: dict[tuple[str, str], dict[str | None, GroupLag]] = {}
        for ref, lag in zip(refs, await overview.group_lags(self.redis, refs), strict=True):
            out.setdefault((ref.topic, ref.app), {})[ref.client_id] = lag
        return out

    async def consume_failures(
        self, groups: Sequence[tuple[str, str]], *, minutes: int = 60
    ) -> dict[tuple[str, str], int]:
        """Messages each consumer group ``(topic, app)`` failed in the last ``minutes``
        whole minutes and the current one — a nack, a JMQ4 retry ack, a failed retry, a
        VibeMQ ack timeout, a pull batch whose lock ran out unacked, over any protocol,
        on any broker (groups without a failure left out): one pipelined round trip
        whatever their number."""
        return await self._recent(groups, FAILED, minutes)

    async def offset_moves(
        self, groups: Sequence[tuple[str, str]], *, minutes: int = 60
    ) -> dict[tuple[str, str], int]:
        """How often each consumer group ``(topic, app)``'s committed offset moved in the
        last ``minutes`` whole minutes and the current one, not by consuming: a client's
        forceAck rewound or skipped it, a client set it elsewhere itself
        (:meth:`reset_offsets` ``by_client``: JMQ4 COMMIT_ACK_INDEX), or
        :meth:`commit_and_fetch` reported it past the partition's end (HTTP-MQ: the
        client committed or was handed an offset the partition does not have); what
        retention overtook is a retention loss, counted by :meth:`retention_losses`. Groups
        without a move left out; one pipelined round trip whatever their number."""
        return await self._recent(groups, MOVED, minutes)

    async def held_back_send_backs(
        self, groups: Sequence[tuple[str, str]], *, minutes: int = 60
    ) -> dict[tuple[str, str], int]:
        """Failed messages of each consumer group ``(topic, app)`` that its topic's
        send-back limit (``TopicInfo.send_back_limit``) kept out of the retry store in the
        last ``minutes`` whole minutes and the current one: released and delivered again
        instead (each is a consume failure too). Groups without any left out; one
        pipelined round trip whatever their number."""
        return await self._recent(groups, HELD_BACK, minutes)

    async def _recent(
        self, groups: Sequence[tuple[str, str]], what: str, minutes: int
    ) -> dict[tuple[str, str], int]:
        """The group counts ``what`` of ``groups`` over the last ``minutes`` and this one."""
        await self.counters.flush()
        now = self.now_ms()
        return await self.counters.grouped(
            groups, what, start_ms=(now // 60_000 - minutes) * 60_000, end_ms=now + 1
        )

    async def produce_rates(
        self,
        topics: Sequence[str],
        *,
        minutes: int = 5,
        through_current: bool = False,
        now_ms: int | None = None,
    ) -> dict[str, TopicRate]:
        """Messages produced to each topic in the last ``minutes`` whole minutes, or with
        ``through_current`` in the ``minutes`` up to and including the current one (one
        pipelined round trip per thousand topics). ``now_ms``: the engine's clock."""
        await self.counters.flush()
        rates = await overview.produce_rates(
            self.redis,
            list(topics),
            minutes=minutes,
            now_ms=self.now_ms() if now_ms is None else now_ms,
            through_current=through_current,
        )
        return {r.topic: r for r in rates}

    async def broadcast_clients(
        self, topic: str, app: str, *, active_within_ms: int | None = ACTIVE_CLIENT_MS
    ) -> list[str]:
        """Registered broadcast clientIds (seen within ``active_within_ms``; None = all)."""
        since = None if active_within_ms is None else self.now_ms() - active_within_ms
        return await offsets_mod.clients(self.redis, topic, app, since)

    async def forget_idle_clients(
        self, *, idle_ms: int, limit: int = IDLE_CLIENTS_BATCH
    ) -> dict[tuple[str, str], list[str]]:
        """Forget the broadcast clients of every broadcast consumer in the catalog that
        have not fetched for ``idle_ms``: off the registry (so off the console's lists,
        resets and re-consumes), their progress, own retries and resend list deleted. A
        client that fetches again later starts anew, at its consumer's start position.
        At most ``limit`` per consumer per call (the rest the next); one round trip to
        find them whatever the number of consumers, two more per consumer with some.
        Returns those forgotten, by consumer."""
        groups = [
            (c.topic, c.app, info)
            for c in self.catalog.consumers
            if (info := self.catalog.topics.get(c.topic)) is not None
            and self._by_broadcast(info, c)
        ]
        before = self.now_ms() - idle_ms
        idle = await offsets_mod.idle_clients(
            self.redis, [(t, a) for t, a, _ in groups], before, limit
        )
        out: dict[tuple[str, str], list[str]] = {}
        for (topic, app, info), found in zip(groups, idle, strict=True):
            if not found:
                continue
            gone = await offsets_mod.unregister_idle(self.redis, topic, app, found)
            await erase_clients(self.redis, topic, range(info.partitions), app, gone)
            if gone:
                out[(topic, app)] = gone
        return out

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
        if self._by_broadcast(info, policy) and client_id is None:
            clients = list(await self.broadcast_clients(topic, app))
        return await resend_mod.add(self.redis, topic, app, entries, clients)

    async def take_resends(
        self, topic: str, app: str, *, client_id: str | None = None, limit: int = 32
    ) -> list[Delivery]:
        """Pop queued resends (each is returned exactly once, cluster-wide)."""
        self.topic(topic)
        return await resend_mod.take(self.redis, topic, app, client_id, limit)
