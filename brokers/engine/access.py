"""Who may do what: the engine's one gate, the same for every front-end.

An app produces to a topic only with a producer policy on it and consumes only with a
consumer policy. The policy's blacklist refuses client addresses (IPs or networks), its
rate limit (messages per second, one token bucket per (topic, app) shared by the whole
cluster, :mod:`.ratelimit`) throttles, and a paused consumer gets nothing. Every produce
and consume operation of :class:`~brokers.engine.engine.Engine` asks this gate first;
front-ends pass the app (from its token, :meth:`CatalogSnapshot.app_for_token`, or the
topic's anonymous app for a client without one) and the client address, and map the
typed refusals of :mod:`.errors` to their own wire errors. No server reads a policy.

Refusals: :class:`ProducerNotFound` / :class:`ConsumerNotFound` (no policy),
:class:`ClientNotAllowed` / :class:`ConsumerClientNotAllowed` (blacklisted address) —
all :class:`AccessDenied` — and :class:`RateLimited`. A paused consumer is not refused:
:meth:`Gate.consumer` reports it and the lease paths deliver nothing while it lasts.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable

from brokers.engine.catalog import (
    CatalogSnapshot,
    ConsumerPolicyInfo,
    ProducerPolicyInfo,
    TopicInfo,
)
from brokers.engine.errors import (
    ClientNotAllowed,
    ConsumerClientNotAllowed,
    ConsumerNotFound,
    InvalidMessage,
    ProducerNotFound,
    RateLimited,
    TopicNotFound,
)
from brokers.engine.ratelimit import RateLimiter

PRODUCE, CONSUME = "produce", "consume"
TOPIC_SEND = "send"
"""The bucket of a topic's send limit (all producers together)."""
TOPIC_SEND_BACK = "send-back"
"""The bucket of a topic's send-back limit (failed messages its consumers copy for a
retry, all together)."""
DLQ_SUFFIX = ".dlq"
NAME_MAX = 255


def valid_name(name: str) -> bool:
    """Topic and app names on every protocol: 1–255 characters, no control characters
    (the catalog's own rule is stricter, so every name it holds passes)."""
    return 0 < len(name) <= NAME_MAX and name.isprintable()


@functools.lru_cache(maxsize=4096)
def _networks(
    blacklist: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    nets = []
    for item in blacklist:
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:  # the catalog validates entries; an odd one never matches
            continue
    return tuple(nets)


def host_of(address: str) -> str:
    """The host part of ``host``, ``host:port`` or ``[v6]:port``."""
    if address.startswith("["):
        return address[1:].partition("]")[0]
    if address.count(":") == 1:
        return address.partition(":")[0]
    return address


@functools.lru_cache(maxsize=4096)
def _ips(address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
    """The client's IP, and for an IPv4-mapped IPv6 address (``::ffff:10.0.0.1``) also the
    IPv4 address it carries, so either form of a blacklist entry matches it."""
    try:
        ip = ipaddress.ip_address(host_of(address))
    except ValueError:
        return ()
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return (ip, ip.ipv4_mapped)
    return (ip,)


def blacklisted(address: str | None, blacklist: tuple[str, ...]) -> bool:
    """True when the client address falls in one of the policy's IPs or networks."""
    if not address or not blacklist:
        return False
    ips = _ips(address)
    return any(
        ip.version == net.version and ip in net for net in _networks(tuple(blacklist)) for ip in ips
    )


def dead_letter_queue(info: TopicInfo) -> str:
    """Where the dead letters of ``info`` go: the name its settings give, or
    ``<code>.dlq``."""
    return info.queue.dead_letter_queue or info.code + DLQ_SUFFIX


def foreign_dead_letter_queue(snapshot: CatalogSnapshot, info: TopicInfo) -> str | None:
    """The name of ``info``'s dead-letter queue when the catalog has a topic of that name
    that another team owns — no DLQ of ``info``'s: its dead letters must not reach that
    team's consumers (a queue named ``<x>.dlq`` made before ``x``) — else None."""
    name = dead_letter_queue(info)
    other = snapshot.topics.get(name)
    return name if other is not None and other.team != info.team else None


def is_dead_letter_queue(snapshot: CatalogSnapshot, topic: str) -> bool:
    """Whether ``topic`` is named as a dead-letter queue — ``<queue>.dlq``, or the name a
    topic's settings give — and so keeps no dead letters of its own."""
    return topic.endswith(DLQ_SUFFIX) or snapshot.dead_letter_queue_of(topic) is not None


def dead_letter_parent(snapshot: CatalogSnapshot, topic: str) -> TopicInfo | None:
    """The queue topic whose dead-letter queue ``topic`` is (the name its settings give,
    or ``<queue>.dlq`` when they give none), when the catalog has no topic of that name
    and the queue has its DLQ on; else None."""
    named = snapshot.dead_letter_queue_of(topic)
    if named is not None:
        parent = snapshot.topics.get(named)
    elif topic.endswith(DLQ_SUFFIX):
        parent = snapshot.topics.get(topic[: -len(DLQ_SUFFIX)])
        if parent is not None and parent.queue.dead_letter_queue:
            return None  # its dead letters go elsewhere
    else:
        return None
    if parent is None:
        return None
    settings = parent.queue
    if not (settings.dead_letter_enabled or settings.overflow_policy == "RedirectToDlq"):
        return None
    return parent


class Gate:
    """Checks an app against its policies on a topic (see the module docstring).

    ``catalog`` returns the current snapshot; ``limiter`` holds the rate-limit buckets;
    ``now_ms`` is the engine's clock; ``seen`` hears every produce and consume let
    through for a client address: ``(app, address, topic, role)`` (:mod:`.clients`).
    """

    def __init__(
        self,
        catalog: Callable[[], CatalogSnapshot],
        limiter: RateLimiter,
        now_ms: Callable[[], int],
        seen: Callable[[str, str, str, str], None] | None = None,
    ) -> None:
        self._catalog = catalog
        self._limiter = limiter
        self._now_ms = now_ms
        self._seen = seen

    def _topic(self, snapshot: CatalogSnapshot, topic: str, app: str) -> str:
        """The topic whose policies govern ``topic``: itself, or for the dead-letter queue
        of a queue topic that has none of its own in the catalog, that queue (its
        producers and consumers may use its DLQ). A malformed topic or app name is
        InvalidMessage on every protocol, before any permission is looked at."""
        if topic not in snapshot.topics:
            parent = dead_letter_parent(snapshot, topic)
            if parent is not None:
                return parent.code
            if not valid_name(topic):
                raise InvalidMessage("invalid topic name")
            raise TopicNotFound(f"topic {topic} does not exist")
        if app and app not in snapshot.apps and not valid_name(app):
            raise InvalidMessage("invalid app name")
        return topic

    # ------------------------------------------------------------------ produce

    def producer(self, topic: str, app: str, address: str | None) -> ProducerPolicyInfo:
        """The producer policy of ``app`` on ``topic``; refuses an app without one and a
        blacklisted ``address`` (None: not checked, as for a registration)."""
        snapshot = self._catalog()
        policy = snapshot.producer(self._topic(snapshot, topic, app), app)
        if policy is None:
            raise ProducerNotFound(f"app {app or '(none)'} may not produce to {topic}")
        if blacklisted(address, policy.blacklist):
            raise ClientNotAllowed(f"client {host_of(address or '')} may not produce to {topic}")
        if address and self._seen is not None:
            self._seen(app, address, topic, PRODUCE)
        return policy

    def send_limit(self, policy: ProducerPolicyInfo) -> int | None:
        """The topic-wide send limit of the topic ``policy`` produces to (None: none)."""
        info = self._catalog().topics.get(policy.topic)
        return info.send_limit if info is not None else None

    def limits_produce(self, policy: ProducerPolicyInfo) -> bool:
        """Whether a produce under ``policy`` must take permits: the producer's own rate
        limit, or its topic's send limit (all producers together)."""
        return bool(policy.rate_limit) or bool(self.send_limit(policy))

    def over_limit(self, policy: ProducerPolicyInfo) -> str:
        """What to tell a producer whose messages its limits cut short."""
        limit = self.send_limit(policy)
        if policy.rate_limit and limit:
            return (
                f"producer {policy.name} is over its {policy.rate_limit}/s limit or topic "
                f"{policy.topic} over its {limit}/s send limit"
            )
        if limit:
            return f"topic {policy.topic} is over its {limit}/s send limit"
        return f"producer {policy.name} is over its {policy.rate_limit}/s limit"

    async def admit_produce(self, policy: ProducerPolicyInfo, count: int) -> None:
        """Take ``count`` permits of the producer's rate limit and of its topic's send
        limit, all or none."""
        await self._admit(policy, count, up_to=False)

    async def admit_produce_up_to(self, policy: ProducerPolicyInfo, count: int) -> int:
        """Take up to ``count`` permits of both limits (messages stored one by one may be
        cut short); how many were granted. RateLimited when not even one is there."""
        return await self._admit(policy, count, up_to=True)

    async def _admit(self, policy: ProducerPolicyInfo, count: int, *, up_to: bool) -> int:
        """The producer's permits first, then as many of the topic's; what the topic does
        not let through goes back to the producer."""
        if count <= 0:
            return count
        granted = count
        if policy.rate_limit:
            granted, wait = await self._take(
                PRODUCE, policy.topic, policy.app, policy.rate_limit, count, up_to
            )
            if not granted:
                raise RateLimited(
                    f"producer {policy.name} is over its {policy.rate_limit}/s limit", wait
                )
        limit = self.send_limit(policy)
        if not limit:
            return granted
        admitted, wait = await self._take(TOPIC_SEND, policy.topic, "", limit, granted, up_to)
        await self._give_back(PRODUCE, policy, granted - admitted)  # the topic's refusal
        if not admitted:
            raise RateLimited(f"topic {policy.topic} is over its {limit}/s send limit", wait)
        return admitted

    async def admit_send_back(self, topic: str, count: int) -> bool:
        """Take ``count`` permits of the topic's send-back limit, all or none (a run over
        the limit passes on a full bucket and leaves a debt); whether they were taken
        (True on a topic without that limit)."""
        info = self._catalog().topics.get(topic)
        limit = info.send_back_limit if info is not None else None
        if not limit or count <= 0:
            return True
        admitted, _ = await self._take(TOPIC_SEND_BACK, topic, "", limit, count, False)
        return admitted == count

    async def _take(
        self, kind: str, topic: str, app: str, rate: int, cost: int, up_to: bool
    ) -> tuple[int, int]:
        """(permits granted, ms to wait when none) of one bucket: up to ``cost``, or all
        ``cost`` or none."""
        acquire = self._limiter.acquire_up_to if up_to else self._limiter.acquire
        permit = await acquire(kind, topic, app, rate=rate, cost=cost, now_ms=self._now_ms())
        return (permit.count if up_to else (cost if permit.granted else 0)), permit.retry_after_ms

    async def _give_back(
        self, kind: str, policy: ProducerPolicyInfo | ConsumerPolicyInfo, count: int
    ) -> None:
        """Return ``count`` permits to the bucket of ``policy``'s own rate limit."""
        if policy.rate_limit and count > 0:
            await self._limiter.charge(
                kind,
                policy.topic,
                policy.app,
                rate=policy.rate_limit,
                cost=-count,
                now_ms=self._now_ms(),
            )

    async def produce(
        self, topic: str, app: str, address: str | None, count: int
    ) -> ProducerPolicyInfo:
        """:meth:`producer`, then :meth:`admit_produce` for ``count`` messages."""
        policy = self.producer(topic, app, address)
        await self.admit_produce(policy, count)
        return policy

    # ------------------------------------------------------------------ consume

    def consumer_terms(self, topic: str, app: str) -> tuple[object, ...]:
        """The catalog entries :meth:`consumer` and a consume of ``app`` on ``topic`` read
        — the topic (or the queue whose dead-letter queue it is), the app's consumer
        policy there, the app — as a tuple: equal tuples from two snapshots give the same
        answers."""
        snapshot = self._catalog()
        info = snapshot.topics.get(topic)
        parent = dead_letter_parent(snapshot, topic) if info is None else None
        governing = topic if parent is None else parent.code
        return (info, parent, snapshot.consumer(governing, app), snapshot.apps.get(app))

    def consumer(self, topic: str, app: str, address: str | None) -> ConsumerPolicyInfo:
        """The consumer policy of ``app`` on ``topic``; refuses an app without one and a
        blacklisted ``address``. The caller checks ``paused`` (nothing is delivered
        while it is set; subscribing is still allowed)."""
        snapshot = self._catalog()
        policy = snapshot.consumer(self._topic(snapshot, topic, app), app)
        if policy is None:
            raise ConsumerNotFound(f"app {app or '(none)'} may not consume {topic}")
        if blacklisted(address, policy.blacklist):
            raise ConsumerClientNotAllowed(
                f"client {host_of(address or '')} may not consume {topic}"
            )
        if address and self._seen is not None:
            self._seen(app, address, topic, CONSUME)
        return policy

    async def admit_consume(self, policy: ConsumerPolicyInfo, count: int) -> int:
        """How many of ``count`` messages the consumer's rate limit lets through now (at
        least one); RateLimited, blocking the group for a second, when none."""
        if not policy.rate_limit or count <= 0:
            return count
        permit = await self._limiter.acquire_up_to(
            CONSUME,
            policy.topic,
            policy.app,
            rate=policy.rate_limit,
            cost=count,
            now_ms=self._now_ms(),
        )
        if not permit.granted:
            raise RateLimited(
                f"consumer {policy.name} is over its {policy.rate_limit}/s limit",
                permit.retry_after_ms,
            )
        return permit.count

    async def admit_fetch(self, policy: ConsumerPolicyInfo) -> None:
        """A consumer's fetch request costs one permit (http-mq.md §11); RateLimited,
        blocking the group for a second, when there is none. The messages it returns are
        charged afterwards (:meth:`charge_consume`)."""
        if not policy.rate_limit:
            return
        permit = await self._limiter.acquire(
            CONSUME, policy.topic, policy.app, rate=policy.rate_limit, cost=1, now_ms=self._now_ms()
        )
        if not permit.granted:
            raise RateLimited(
                f"consumer {policy.name} is over its {policy.rate_limit}/s limit",
                permit.retry_after_ms,
            )

    async def charge_consume(self, policy: ConsumerPolicyInfo, delivered: int) -> None:
        """Charge messages a fetch returned (the balance may go below zero: the next
        fetches wait for the debt to refill)."""
        if policy.rate_limit and delivered > 0:
            await self._limiter.charge(
                CONSUME,
                policy.topic,
                policy.app,
                rate=policy.rate_limit,
                cost=delivered,
                now_ms=self._now_ms(),
            )

    async def refund_consume(self, policy: ConsumerPolicyInfo, unused: int) -> None:
        """Give back permits taken by :meth:`admit_consume` for messages not delivered."""
        await self._give_back(CONSUME, policy, unused)
