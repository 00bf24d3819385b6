"""FETCH for a consumer group (JMQ4 FETCH_TOPIC_MESSAGE and HTTP-MQ /mq/message).

The engine's gate (:mod:`brokers.engine.access`) has already checked the consumer policy
(paused → PAUSED, blacklisted address → BLACKLISTED, rate limit; none reads or locks)
and may have cut ``count`` to the permits its rate limit gave. Then the candidate partitions (this broker's, or all when the engine
has no broker id) are ordered by backlog, largest first, ties rotated per (topic, app) so
equal partitions are served round-robin — on a single Redis inside one script that also
locks and reads (:mod:`brokers.engine.scan`), on Redis Cluster after reading their
states in one pipeline. Partitions locked
by anyone are skipped, and a consumer already holding ``maxPartitionNum`` locks gets no
more. The first partition whose lock-and-read script returns messages wins, so one
result carries one partition. Retries (partition 32767) are served with the policy's
read-retry probability, and whenever the partitions have nothing. Sequential topics
never use the retry store: a failed message is redelivered in order.

Long polling parks the caller on the topic's notification until data arrives, the
deadline passes, or a locked/delayed partition or a retry may become servable. A
notification names its partition, and a woken fetch looks only there (one script call);
it looks at everything again when a timer fires or a notification named no partition.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from redis.asyncio.cluster import RedisCluster

from brokers.engine.ack import CommitCall
from brokers.engine.catalog import ConsumerPolicyInfo, TopicInfo
from brokers.engine.consume import (
    EMPTY,
    FOUND,
    LOCKED,
    Attempt,
    read_states,
    recent_access,
    record_access,
    try_partition,
)
from brokers.engine.keys import RETRY_PARTITION, consumer_id
from brokers.engine.model import CommitResult, Delivery, FetchResult, FetchStatus
from brokers.engine.notify import Notifier, waiter_group
from brokers.engine.offsets import set_ack
from brokers.engine.read import PULL_READ_BYTES
from brokers.engine.record import with_position
from brokers.engine.redisio import AnyRedis
from brokers.engine.retry import RetryPolicy, retry_stores
from brokers.engine.retry_presence import RetryPresence, lease_first_due
from brokers.engine.scan import Looked, ScanOutcome, fetch_any

OUTSIDE = 2**53
"""The backlog a partition whose ack index lies outside it sorts as (reported first)."""
MAX_PARKED = 10_000
PARK_FACTOR = 8
"""Long polls parked per (topic, app) on one process: up to this many per partition the
request may read (jmq4.md §6.2 allows one per local partition; a group with more
consumers than partitions would then have the rest polling in a loop). Counted per app,
so one app's long polls never use up another's (they were counted per topic)."""


@dataclass(slots=True)
class Piggyback:
    """Work that rides on a fetch's first look at its partitions (HTTP-MQ's request):
    ``commit`` runs before it, and up to ``resends[1]`` entries of the resend list
    ``resends[0]`` are popped after it unless the look failed for locks. On a single
    Redis all three are one script call (:data:`~brokers.engine.scan.COMMIT_FETCH_ANY`);
    otherwise, or when the fetch looks at the retry store first, the commit runs on its
    own before the fetch and the resends are left to the caller. What ran is recorded:
    ``committed`` (the commit's outcome) and ``popped`` (None: not popped)."""

    commit: CommitCall | None = None
    resends: tuple[str, int] | None = None
    committed: CommitResult | None = None
    popped: list[bytes] | None = None

    async def commit_alone(self, client: AnyRedis) -> None:
        """Run the commit now, on its own, if it has not run."""
        if self.commit is not None and self.committed is None:
            self.committed = await self.commit.run(client)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    topic: TopicInfo
    app: str
    policy: ConsumerPolicyInfo
    partitions: tuple[int, ...]
    count: int
    ack_timeout_ms: int
    owner: str
    client_id: str | None
    address: str
    sequential: bool
    init: str = "earliest"
    holder: str | None = None
    """The lease holder retries leased for a connection are recorded under (None: a
    stateless client's, which only their lease's end hands on)."""
    report_correction: bool = False
    """An ack index found outside a partition is reported (CORRECTED, locked over
    nothing) rather than moved silently and read past."""
    max_bytes: int = 0
    """Records are read while their bytes stay within this (at least one; 0: only the
    engine's own cap, ``PULL_READ_BYTES``): what the caller's response has room for."""
    regate: Callable[[], ConsumerPolicyInfo | FetchResult] | None = None
    """The gate again, on the catalog of now: the consumer policy as it stands, or the
    result that refuses the fetch (paused, blacklisted; a policy or topic gone raises).
    A parked fetch asks it before every look after the first, so a pause, a blacklist or
    a deleted policy stops a long poll that started before it."""


class Fetcher:
    """Chooses, locks and reads partitions for consumer fetches."""

    def __init__(
        self,
        client: AnyRedis,
        notifier: Notifier,
        now_ms: Callable[[], int],
        retry_policy: Callable[[ConsumerPolicyInfo], RetryPolicy],
        rng: random.Random,
        retry_presence: RetryPresence,
    ) -> None:
        self._client = client
        self._notifier = notifier
        self._now_ms = now_ms
        self._retry_policy = retry_policy
        self._rng = rng
        self._rotation: dict[tuple[str, str], itertools.count] = defaultdict(itertools.count)
        self._retries = retry_presence

    async def fetch(
        self, req: FetchRequest, long_poll_ms: int = 0, extra: Piggyback | None = None
    ) -> FetchResult:
        """Fetch once, then park until data arrives if asked to long-poll. ``extra`` rides
        on the first look (see :class:`Piggyback`).

        A parked fetch is woken with the partitions that got messages and looks at just
        those (one script call each); it re-reads everything only when its timer (lock
        expiry, delay, retry due) fires or a notification named no partition.
        """
        topic = req.topic.code
        if long_poll_ms <= 0 or (
            self._notifier.parked_for(topic, req.app) >= max(1, len(req.partitions)) * PARK_FACTOR
            or self._notifier.total_parked >= MAX_PARKED
        ):
            return (await self._scan(req, extra))[0]
        if extra is not None:
            await extra.commit_alone(self._client)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + long_poll_ms / 1000
        group = waiter_group(req.app, req.client_id)
        # Watching before the first look: a notification that arrives while it runs is
        # kept in the event, so nothing appended after the look goes unnoticed.
        async with self._notifier.watch(topic, group) as event:
            hinted: set[int] | None = None
            timer: int | None = None  # wall-clock ms of the next full look
            while True:
                if hinted is None or req.policy.max_partition_num > 0:
                    result, more = await self._scan(req)
                    timer = result.retry_after_ms
                else:
                    result, more = await self._look_at(req, hinted)
                    if result.retry_after_ms is not None:
                        timer = min(timer or result.retry_after_ms, result.retry_after_ms)
                if result.found or result.status is FetchStatus.CORRECTED:
                    self._notifier.pass_on(topic, event, more, taken=result.partition)
                    return result
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return result
                wait = remaining
                if timer is not None:
                    wait = min(wait, max(0.0, (timer - self._now_ms()) / 1000) + 0.001)
                try:
                    async with asyncio.timeout(wait):  # no task per wait, unlike wait_for
                        await event.wait()
                    hinted = event.take()
                except TimeoutError:
                    hinted = None
                refused, req = self._regated(req)  # the gate of now, before the next look
                if refused is not None:
                    return refused

    @staticmethod
    def _regated(req: FetchRequest) -> tuple[FetchResult | None, FetchRequest]:
        """(the result refusing ``req`` now, or None — ``req`` with its policy as it
        stands now); see :attr:`FetchRequest.regate`."""
        if req.regate is None:
            return None, req
        now = req.regate()
        if isinstance(now, FetchResult):
            return now, req
        return None, req if now is req.policy else replace(req, policy=now)

    def _found(self, req: FetchRequest, p: int, att: Attempt, now: int) -> FetchResult:
        """The result of a partition locked for ``req``: a batch, or (nothing read) a
        reported correction."""
        found = bool(att.deliveries)
        start = max(att.ack, att.min)
        return FetchResult(
            status=FetchStatus.FOUND if found else FetchStatus.CORRECTED,
            topic=req.topic.code,
            partition=p,
            messages=tuple(att.deliveries),
            lock_token=att.token,
            lock_expires_ms=att.expires,
            start=start,
            end=att.deliveries[-1].end if found else start,
            first_consume=att.first,
            ack_index=att.ack,
            max_index=att.max,
            accessed_ms=now,
            lapsed=att.lapsed,
            corrected_from=att.corrected,
        )

    @staticmethod
    def _lock_args(req: FetchRequest, now: int) -> dict[str, Any]:
        """What the lock-and-read scripts need besides the partitions."""
        delay = req.policy.delay_ms
        return {
            "owner": req.owner,
            "now_ms": now,
            "timeout_ms": req.ack_timeout_ms,
            "count": req.count,
            "address": req.address,
            "init": req.init,
            "max_store_ms": now - delay if delay > 0 else None,
            "report_correction": req.report_correction,
            "max_bytes": req.max_bytes,
        }

    async def _try(self, req: FetchRequest, p: int, cid: str, now: int) -> Attempt:
        return await try_partition(
            self._client, req.topic.code, p, cid, **self._lock_args(req, now)
        )

    async def _look_at(self, req: FetchRequest, hinted: set[int]) -> tuple[FetchResult, list[int]]:
        """Try just the ``hinted`` partitions (those of ours); (result, untried ones)."""
        ours = [p for p in req.partitions if p in hinted]
        now = self._now_ms()
        cid = consumer_id(req.app, req.client_id)
        hints: list[int] = []
        any_locked = False
        lapsed = 0
        for i, p in enumerate(ours):
            att = await self._try(req, p, cid, now)
            if att.status == FOUND:
                att.lapsed += lapsed
                return self._found(req, p, att, now), ours[i + 1 :]
            if att.status == LOCKED:
                hints.append(att.expires)
                any_locked = True
            elif att.status == EMPTY:
                lapsed += att.lapsed
                if att.blocked:
                    hints.append(att.blocked + req.policy.delay_ms)
        status = FetchStatus.NO_PARTITION if any_locked else FetchStatus.NO_NEW_MSG
        result = FetchResult(
            status=status,
            topic=req.topic.code,
            retry_after_ms=min(hints) if hints else None,
            lapsed=lapsed,
        )
        return result, []

    async def _scan(
        self, req: FetchRequest, extra: Piggyback | None = None
    ) -> tuple[FetchResult, list[int]]:
        """One look at every partition; (result, partitions with a backlog not tried)."""
        now = self._now_ms()
        topic = req.topic.code
        policy = req.policy
        use_retry = policy.retry and not req.sequential
        roll = self._rng.random() * 100
        if use_retry and roll < policy.read_retry_probability:
            if extra is not None:
                await extra.commit_alone(self._client)
            found, _ = await self._fetch_retry(req, now)
            if found is not None:
                return found, []
        cid = consumer_id(req.app, req.client_id)
        n = len(req.partitions) or 1
        turn = next(self._rotation[(topic, cid)]) % n
        if isinstance(self._client, RedisCluster):
            if extra is not None:
                await extra.commit_alone(self._client)
            outcome = await self._scan_pipelined(req, cid, now, turn)
        else:
            commit = extra.commit if extra is not None and extra.committed is None else None
            resends = extra.resends if extra is not None and extra.popped is None else None
            outcome = await fetch_any(
                self._client,
                topic,
                req.partitions,
                cid,
                turn=turn,
                max_partition_num=policy.max_partition_num,
                commit=commit,
                resends=resends,
                **self._lock_args(req, now),
            )
            if extra is not None:
                if commit is not None:
                    extra.committed = outcome.commit
                if resends is not None:
                    extra.popped = outcome.resends
        if outcome.attempt is not None:
            return (
                self._found(req, outcome.partition, outcome.attempt, now),
                list(outcome.untried),
            )
        hints: list[int] = []
        if outcome.lock_expiry:
            hints.append(outcome.lock_expiry)
        if outcome.blocked:
            hints.append(outcome.blocked + policy.delay_ms)
        if use_retry:
            found, due = await self._fetch_retry(req, now)
            if found is not None:
                return found, []
            if due is not None:
                hints.append(due)
        status = (  # NO_PARTITION: no partition could be locked (ScanOutcome.locked)
            FetchStatus.NO_PARTITION
            if outcome.locked or outcome.at_max_partitions
            else FetchStatus.NO_NEW_MSG
        )
        result = FetchResult(
            status=status,
            topic=topic,
            retry_after_ms=min(hints) if hints else None,
            lapsed=outcome.lapsed,
        )
        looked = outcome.looked
        if looked is not None and status is FetchStatus.NO_NEW_MSG:
            # where it looked, as it stood (http-mq.md §3.1 queueInfo)
            result = replace(
                result,
                partition=looked.partition,
                first_consume=looked.first_consume,
                ack_index=looked.ack_index,
                max_index=looked.max_index,
                accessed_ms=looked.accessed_ms,
            )
        return result, []

    async def _scan_pipelined(
        self, req: FetchRequest, cid: str, now: int, turn: int
    ) -> ScanOutcome:
        """:func:`fetch_any`'s rules on Redis Cluster: the states of every partition in
        one pipeline, then the lock-and-read script partition by partition."""
        topic = req.topic.code
        states = await read_states(self._client, topic, req.partitions, cid)
        lock_hint = blocked = lapsed = 0
        held = 0
        any_locked = free_any = False
        candidates: list[tuple[int, int]] = []
        n = len(req.partitions) or 1
        looked: Looked | None = None
        seen: Looked | None = None  # a free partition with this client's recent access
        for p, (mn, nxt, st) in zip(req.partitions, states, strict=True):
            first = st["ack"] is None
            if st["ack"] is None and req.init == "latest":
                # pin 'latest' at the first access, or later messages would be skipped too
                st["ack"] = str(
                    await set_ack(self._client, topic, p, cid, "latest", only_if_missing=True)
                ).encode()
            expires = int(st["le"] or 0)
            locked = expires > now
            if locked and st["lo"] is not None and st["lo"].decode() == req.owner:
                held += 1
            ack = int(st["ack"]) if st["ack"] is not None else mn
            if not locked:
                rot = (p - turn) % n
                if looked is None or rot < (looked.partition - turn) % n:
                    looked = Looked(p, min(ack, nxt), nxt, first, now)
                if recent_access(st, now, req.address) and (
                    seen is None or rot < (seen.partition - turn) % n
                ):
                    seen = Looked(p, min(ack, nxt), nxt, first, int(st["t"] or 0))
            backlog = nxt - max(ack, mn)
            if req.report_correction and not mn <= ack <= nxt and not locked:
                candidates.append((OUTSIDE, p))  # reported before any backlog
                continue
            if ack > nxt and not locked:  # committed past the end: fetch_one corrects it
                candidates.append((0, p))
                continue
            if backlog <= 0:
                free_any = free_any or not locked  # free and at its end: lockable
                continue
            if locked:
                lock_hint = min(lock_hint or expires, expires)
                any_locked = True
                continue
            candidates.append((backlog, p))
        if req.policy.max_partition_num > 0 and held >= req.policy.max_partition_num:
            return ScanOutcome(lock_expiry=lock_hint, locked=any_locked, at_max_partitions=True)
        candidates.sort(key=lambda c: (-c[0], (c[1] - turn) % n))
        for i, (_backlog, p) in enumerate(candidates):
            att = await self._try(req, p, cid, now)
            if att.status == FOUND:
                att.lapsed += lapsed
                untried = tuple(c[1] for c in candidates[i + 1 :])
                return ScanOutcome(partition=p, attempt=att, untried=untried)
            if att.status == LOCKED:
                lock_hint = min(lock_hint or att.expires, att.expires)
                any_locked = True
            elif att.status == EMPTY:
                free_any = True
                lapsed += att.lapsed
                if att.blocked:
                    blocked = min(blocked or att.blocked, att.blocked)
        if seen is not None:  # fetch_any's rule: at most one record a second per client
            looked = seen
        elif looked is not None:  # fetch_any's record of where it looked (a slot of its own)
            await record_access(self._client, topic, looked.partition, cid, now, req.address)
        return ScanOutcome(
            lock_expiry=lock_hint,
            blocked=blocked,
            locked=any_locked and not free_any,
            lapsed=lapsed,
            looked=looked,
        )

    async def _fetch_retry(
        self, req: FetchRequest, now: int
    ) -> tuple[FetchResult | None, int | None]:
        """(due retries leased, or None; when none: the earliest retry's due time). A
        broadcast client's own retries first, then the group's."""
        code = req.topic.code
        leased, due = await lease_first_due(
            self._retries,
            retry_stores(self._client, code, req.app, req.client_id, self._retries.forget),
            code,
            now_ms=now,
            lease_ms=req.ack_timeout_ms,
            max_items=req.count,
            policy=self._retry_policy(req.policy),
            holder=req.holder,
            max_bytes=min(req.max_bytes or PULL_READ_BYTES, PULL_READ_BYTES),
        )
        if not leased:
            return None, due
        return self._retry_result(req, leased, now), None

    def _retry_result(
        self, req: FetchRequest, leased: list[tuple[int, int, int, int, int, bytes]], now: int
    ) -> FetchResult:
        deliveries = tuple(
            Delivery(
                RETRY_PARTITION,
                rid,
                count,
                with_position(record, RETRY_PARTITION, rid),
                origin=(partition, index),
                attempts=attempts,
            )
            for rid, partition, index, count, attempts, record in leased
        )
        return FetchResult(
            status=FetchStatus.FOUND,
            topic=req.topic.code,
            partition=RETRY_PARTITION,
            messages=deliveries,
            lock_expires_ms=now + req.ack_timeout_ms,
            start=deliveries[0].index,
            end=deliveries[-1].end,
        )
