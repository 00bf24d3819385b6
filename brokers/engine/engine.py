"""The engine facade: the one API every protocol server, the proxy, the console and the
pipeline call. It holds the engine's state and composes its sections (one mixin each, in
:mod:`brokers.engine.sections`): the log, access, pull consumers, consumer groups,
retries, transactions, delays, and what the processes of a cluster share about themselves. Every produce and consume method takes the app and the
client address and asks the gate (:mod:`.access`) first; the sections delegate the Redis
work to their modules, so no method here talks to Redis itself.
"""

from __future__ import annotations

import inspect
import random
import time
from collections.abc import Callable, Sequence

from brokers.engine.access import Gate
from brokers.engine.assignment import GroupAssigner
from brokers.engine.catalog import CatalogSnapshot
from brokers.engine.clients import Clients
from brokers.engine.counters import Counters, MinuteTraffic
from brokers.engine.credentials import Credentials
from brokers.engine.errors import TopicNotFound
from brokers.engine.fetch import Fetcher
from brokers.engine.holders import DEFAULT_TTL_MS, Holders
from brokers.engine.joined_appends import AppendJoiner
from brokers.engine.kept_settles import KeptSettles
from brokers.engine.notify import Notifier
from brokers.engine.produce_latency import ClientLatency, ProduceLatencies
from brokers.engine.ratelimit import RateLimiter
from brokers.engine.reconnect import store_errors
from brokers.engine.record import DEFAULT_MAX_BODY
from brokers.engine.redisio import AnyRedis, Durability
from brokers.engine.retry import RetryPolicy
from brokers.engine.retry_presence import RetryPresence
from brokers.engine.sections.access import AccessSection
from brokers.engine.sections.cluster import ClusterSection
from brokers.engine.sections.delays import DelaySection
from brokers.engine.sections.groups import GroupSection
from brokers.engine.sections.log import LogSection
from brokers.engine.sections.pull import PullSection
from brokers.engine.sections.retries import RetrySection
from brokers.engine.sections.transactions import TransactionSection
from brokers.engine.shared import QueueRetry, SharedDelivery
from brokers.engine.turns import PartitionTurns

DEFAULT_RETRY = RetryPolicy()
DEFAULT_QUEUE_RETRY = QueueRetry()


class Engine(
    LogSection,
    AccessSection,
    PullSection,
    GroupSection,
    RetrySection,
    TransactionSection,
    DelaySection,
    ClusterSection,
):
    """asyncio message engine on redis.asyncio (single Redis or RedisCluster).

    ``catalog`` returns the current :class:`CatalogSnapshot` (a CatalogWatcher's
    ``current``); ``broker_id`` limits pull fetches to the partitions this broker leads;
    ``clock`` (seconds) stamps messages and drives lease expiry (tests pass a fake one).
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
        holder_ttl_ms: int = DEFAULT_TTL_MS,
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
        self._turns = PartitionTurns(self._rng)
        self.durability = Durability(redis, timeout_ms=durability_timeout_ms, replicas=replicas)
        self.notifier = Notifier(redis)
        self.counters = Counters(redis, clock)
        self.produce_latencies = ProduceLatencies(redis, clock)
        self.holders = Holders(
            redis, self._release_held, leave=self._leave_for_dead, ttl_ms=holder_ttl_ms
        )
        self.clients = Clients(redis, lambda: self.holders.id, self.holders.start)
        self.gate = Gate(catalog, RateLimiter(redis), self.now_ms, self.clients.seen)
        self.credentials = Credentials(catalog)
        """App tokens open connections act on; revoked ones end their connections."""
        self._next_guess: dict[tuple[str, int], int] = {}  # past the appends in flight
        self._next_seen: dict[tuple[str, int], int] = {}  # as the last append returned
        self._joiner = AppendJoiner(self._send_joined)
        self.retry_presence = RetryPresence(self.notifier, self.now_ms)
        self._fetcher = Fetcher(
            redis, self.notifier, self.now_ms, self._retry_for, self._rng, self.retry_presence
        )
        self.shared = SharedDelivery(redis, self.now_ms, self._dead_letter, queue_retry)
        self.kept_settles = KeptSettles(self._settle_kept)
        """Settles Redis missed (it was unreachable), made again once it answers."""
        self.assigner = GroupAssigner(redis)
        self._expire_due = {}  # topic → (its groups, ms before which its sweep skips it)

    async def close(self) -> None:
        """Hand on the group leases still held, flush counters and stop the notification
        listener."""
        await self.kept_settles.close()
        await self.clients.close()
        await self.holders.close()
        await self.counters.close()
        await self.produce_latencies.close()
        await self.notifier.close()

    async def _release_held(
        self, topic: str, app: str, client_id: str | None, owner_prefix: str
    ) -> int:
        """What a gone lease holder (owners named ``owner_prefix``…) held in the group
        (``topic``, ``app``, ``client_id``): leased ranges and partition locks, due again
        at once; how many (:mod:`brokers.engine.holders`)."""
        try:
            info = self.group_topic(topic)
        except TopicNotFound:  # deleted since: nothing left to hand on
            return 0
        leases = await self._release_held_leases(info, app, client_id, owner_prefix)
        return leases + await self._release_held_locks(info, app, client_id, owner_prefix)

    async def traffic(
        self, dimension: str, name: str, start_ms: int, end_ms: int
    ) -> list[MinuteTraffic]:
        """Per-minute produce/consume counts and bytes of a 'topic', 'app' or 'broker'."""
        await self.counters.flush()
        return await self.counters.traffic(dimension, name, start_ms, end_ms)

    async def day_traffic(
        self, dimension: str, names: Sequence[str], day: str
    ) -> dict[str, MinuteTraffic]:
        """The produce/consume counts and bytes of each 'topic', 'app' or 'broker' of
        ``names`` on UTC ``day`` (``YYYYMMDD``), whatever the protocol (names without
        traffic left out): a field per count and name, so thousands of topics cost a few
        pipelined round trips."""
        await self.counters.flush()
        return await self.counters.day_totals(dimension, names, day)

    async def produce_latency(
        self, producers: Sequence[tuple[str, str]], hours: int
    ) -> dict[tuple[str, str, str], ClientLatency]:
        """Producer statistics (:mod:`brokers.engine.produce_latency`): (topic, app,
        client host) → how long its appends took (latency buckets) and how many of its
        messages failed, over the last ``hours`` whole hours and the current one, for
        each producer ``(topic, app)`` of ``producers`` — over any protocol, on any
        broker."""
        return await self.produce_latencies.read(producers, hours)


# Every public coroutine of the facade reports an unreachable Redis as StoreUnavailable.
for _name in dir(Engine):
    _method = getattr(Engine, _name)
    if not _name.startswith("_") and inspect.iscoroutinefunction(_method):
        setattr(Engine, _name, store_errors(_method))
