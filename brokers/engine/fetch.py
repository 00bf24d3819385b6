"""FETCH for a consumer group (JMQ4 FETCH_TOPIC_MESSAGE and HTTP-MQ /mq/message).

Policy first: paused → PAUSED, client address on the blacklist → BLACKLISTED (neither
reads nor locks). Then the candidate partitions (this broker's, or all when the engine
has no broker id) are read in one pipeline and ordered by backlog, largest first, ties
rotated per (topic, app) so equal partitions are served round-robin. Partitions locked
by anyone are skipped, and a consumer already holding ``maxPartitionNum`` locks gets no
more. The first partition whose lock-and-read script returns messages wins, so one
result carries one partition. Retries (partition 32767) are served with the policy's
read-retry probability, and whenever the partitions have nothing. Sequential topics
never use the retry store: a failed message is redelivered in order.

Long polling parks the caller on the topic's notification until data arrives, the
deadline passes, or a locked/delayed partition or a retry may become servable.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import itertools
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from brokers.engine.catalog import ConsumerPolicyInfo, TopicInfo
from brokers.engine.consume import EMPTY, FOUND, LOCKED, read_states, try_partition
from brokers.engine.keys import RETRY_PARTITION, consumer_id
from brokers.engine.model import Delivery, FetchResult, FetchStatus
from brokers.engine.notify import Notifier
from brokers.engine.offsets import set_ack
from brokers.engine.record import with_position
from brokers.engine.redisio import AnyRedis
from brokers.engine.retry import RetryPolicy, RetryStore

MAX_PARKED = 10_000


@functools.lru_cache(maxsize=1024)
def _networks(
    blacklist: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    nets = []
    for item in blacklist:
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            continue
    return tuple(nets)


def host_of(address: str) -> str:
    """The host part of ``host``, ``host:port`` or ``[v6]:port``."""
    if address.startswith("["):
        return address[1:].partition("]")[0]
    if address.count(":") == 1:
        return address.partition(":")[0]
    return address


def blacklisted(address: str | None, blacklist: tuple[str, ...]) -> bool:
    """True when the client address falls in one of the policy's IPs or networks."""
    if not address or not blacklist:
        return False
    try:
        ip = ipaddress.ip_address(host_of(address))
    except ValueError:
        return False
    return any(ip in net for net in _networks(tuple(blacklist)))


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


class Fetcher:
    """Chooses, locks and reads partitions for consumer fetches."""

    def __init__(
        self,
        client: AnyRedis,
        notifier: Notifier,
        now_ms: Callable[[], int],
        retry_policy: Callable[[ConsumerPolicyInfo], RetryPolicy],
        rng: random.Random,
    ) -> None:
        self._client = client
        self._notifier = notifier
        self._now_ms = now_ms
        self._retry_policy = retry_policy
        self._rng = rng
        self._rotation: dict[tuple[str, str], itertools.count] = defaultdict(itertools.count)

    async def fetch(self, req: FetchRequest, long_poll_ms: int = 0) -> FetchResult:
        """Fetch once, then park until data arrives if asked to long-poll."""
        result = await self.fetch_once(req)
        if result.found or long_poll_ms <= 0:
            return result
        topic = req.topic.code
        if (
            self._notifier.parked(topic) >= max(1, len(req.partitions)) * 8
            or self._notifier.total_parked >= MAX_PARKED
        ):
            return result
        loop = asyncio.get_running_loop()
        deadline = loop.time() + long_poll_ms / 1000
        group = f"{req.app}\n{req.client_id or ''}"
        async with self._notifier.watch(topic, group) as event:
            woken = False
            while True:
                event.clear()
                result = await self.fetch_once(req)
                remaining = deadline - loop.time()
                if result.found and woken:
                    self._notifier.pass_on(topic, event)
                if result.found or remaining <= 0:
                    return result
                wait = remaining
                if result.retry_after_ms is not None:
                    hint = max(0.0, (result.retry_after_ms - self._now_ms()) / 1000) + 0.001
                    wait = min(wait, hint)
                try:
                    await asyncio.wait_for(event.wait(), wait)
                    woken = True
                except TimeoutError:
                    if loop.time() >= deadline:
                        return await self.fetch_once(req)

    async def fetch_once(self, req: FetchRequest) -> FetchResult:
        now = self._now_ms()
        topic = req.topic.code
        policy = req.policy
        use_retry = policy.retry and not req.sequential
        roll = self._rng.random() * 100
        if use_retry and roll < policy.read_retry_probability:
            found = await self._fetch_retry(req, now)
            if found is not None:
                return found
        cid = consumer_id(req.app, req.client_id)
        states = await read_states(self._client, topic, req.partitions, cid)
        hints: list[int] = []
        held = 0
        any_locked = False
        candidates: list[tuple[int, int]] = []
        for p, (mn, nxt, st) in zip(req.partitions, states, strict=True):
            if st["ack"] is None and req.init == "latest":
                # pin 'latest' at the first access, or later messages would be skipped too
                st["ack"] = str(
                    await set_ack(self._client, topic, p, cid, "latest", only_if_missing=True)
                ).encode()
            expires = int(st["le"] or 0)
            locked = expires > now
            if locked and st["lo"] is not None and st["lo"].decode() == req.owner:
                held += 1
            ack = int(st["ack"]) if st["ack"] is not None else (nxt if req.init == "latest" else mn)
            backlog = nxt - max(ack, mn)
            if backlog <= 0:
                continue
            if locked:
                hints.append(expires)
                any_locked = True
                continue
            candidates.append((backlog, p))
        status = FetchStatus.NO_NEW_MSG
        if policy.max_partition_num > 0 and held >= policy.max_partition_num:
            candidates = []
            status = FetchStatus.NO_PARTITION
        n = len(req.partitions) or 1
        turn = next(self._rotation[(topic, cid)]) % n
        candidates.sort(key=lambda c: (-c[0], (c[1] - turn) % n))
        for _backlog, p in candidates:
            att = await try_partition(
                self._client,
                topic,
                p,
                cid,
                owner=req.owner,
                now_ms=now,
                timeout_ms=req.ack_timeout_ms,
                count=req.count,
                address=req.address,
                init=req.init,
                max_store_ms=now - policy.delay_ms if policy.delay_ms > 0 else None,
            )
            if att.status == FOUND:
                return FetchResult(
                    status=FetchStatus.FOUND,
                    topic=topic,
                    partition=p,
                    messages=tuple(att.deliveries),
                    lock_token=att.token,
                    lock_expires_ms=att.expires,
                    start=max(att.ack, att.min),
                    end=att.deliveries[-1].end,
                    first_consume=att.first,
                )
            if att.status == LOCKED:
                hints.append(att.expires)
                any_locked = True
            elif att.status == EMPTY and att.blocked:
                hints.append(att.blocked + policy.delay_ms)
        if use_retry:
            found = await self._fetch_retry(req, now)
            if found is not None:
                return found
            due = await RetryStore(self._client, topic, req.app).next_due()
            if due is not None:
                hints.append(due)
        if any_locked:
            status = FetchStatus.NO_PARTITION
        return FetchResult(status=status, topic=topic, retry_after_ms=min(hints) if hints else None)

    async def _fetch_retry(self, req: FetchRequest, now: int) -> FetchResult | None:
        store = RetryStore(self._client, req.topic.code, req.app)
        leased = await store.lease(
            now_ms=now,
            lease_ms=req.ack_timeout_ms,
            max_items=req.count,
            policy=self._retry_policy(req.policy),
        )
        if not leased:
            return None
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
