"""Long-poll wake-ups: one pub/sub connection per engine, fanned out to waiters.

Scripts that make messages available (append, commit, lock release) PUBLISH the
partition number on ``mq:n:<topic>``; so does :func:`announce`, for the rest (a release
of leased messages, an offset reset). The notifier subscribes to a topic's channel the
first time someone waits on it, and only lets the waiter re-check after Redis confirmed
the subscription, so a message appended between the check and the wait always wakes
it. Nothing polls Redis: a waiter sleeps until a notification, its own deadline, or a
hint (lock expiry, delay, retry due) the caller computed.

The connection and the subscriptions confirmed on it form one :class:`_Link`. Only the
notifier's own task reads it, and a link that failed once is never used again: its
pending confirmations fail (their waiters wait for the next link), every waiter is woken
to re-check, and a new link is made at once, then with a backoff of at most
:data:`RECONNECT_MAX` seconds while Redis stays unreachable. The new link subscribes
to every topic that has waiters and wakes them again when Redis confirmed it (a message
published while no link listened is never lost: its waiters look again). A
confirmation that never comes (a wedged connection) abandons the link too.

Claims: a notification wakes every process with a waiter on the topic, though one lease
takes the message. A waiter that leases for shared consumer groups (a zbus queue pump, a
VibeMQ queue dispatcher) says which groups it serves and, while parked, how many messages
each could take now (:meth:`Wakeup.park`). A process appending to the topic asks
:meth:`Notifier.claim` first: the groups one of its own parked waiters will take the
append for are named in the notification (:func:`notice`), with the appending process's
:attr:`Notifier.origin`. Another process does not wake its waiters that serve only claimed
groups; it wakes them :data:`CLAIM_GRACE` seconds later instead (once for all claims of
the topic in that time). A waiter that cannot take what was claimed for it after all (its
consumer left or stopped reading) says so when it parks again (:meth:`Wakeup.park`) and
the topic is announced to every process at once (:meth:`Notifier.announce`); the grace
only covers a claimant that crashed, whose claimed messages so wait at most that long and
are not lost. A grace of 50 ms saved nothing on topics under 20 messages a second: each
claimed message still cost every other process a lease, later. Waiters that do not say
what they serve (long-polling fetchers) are woken by every notification, as before. A
request served where it was produced also keeps its reply in that process. (Before: an
RPC call cost 1.32 scripts on one process, 1.92 on two and 2.45 on four, and twice the CPU
on two as on one.)

On a single Redis the claimants are woken early, in the loop turn after the append was
queued on the pipelined connection their leases go on too (``claim(early=True)``): their
lease runs in Redis right behind the append instead of after its reply and notification
came back — produce to delivery 2.0 → 1.3–1.4 ms (p50) on an idle broker here.

(Before: a waiter that subscribed while the lost connection was being replaced did so on
the old pub/sub object, which redis-py reconnected on its own; the confirmation went to
a connection about to be closed, the waiter's future stayed in the table, and every later
waiter on that topic waited its 5 s for it and failed — for as long as the broker ran.)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from brokers.engine.background import cancel_and_wait
from brokers.engine.keys import PREFIX, notify_channel
from brokers.engine.pubsub import open_pubsub
from brokers.engine.redisio import AnyRedis, command

log = logging.getLogger(__name__)
_SENTINEL = f"{PREFIX}:n"
CONFIRM_TIMEOUT = 5.0  # seconds a waiter waits for a link and its subscription
CONNECT_TIMEOUT = 5.0  # seconds one connection attempt may take
RECONNECT_MIN = 0.05  # first backoff after a failed attempt (the first retry is immediate)
RECONNECT_MAX = 0.5  # longest backoff: a returning Redis is noticed within this
CLAIM_GRACE = 1.0  # seconds before waiters skipped for another process's claim look anyway
EARLY_KEPT = 4096  # early claims remembered until their notification comes back
EARLY_IDLE = 0.002  # seconds a claimant must have been parked to be woken early


class _LinkLost(Exception):
    """The link a waiter subscribed on was lost before Redis confirmed it."""


def waiter_group(app: str, client_id: str | None) -> str:
    """The group a fetch waits in (:meth:`Notifier.watch`): one consumer group's
    progress — the app's, or one broadcast client's of it."""
    return f"{app}\n{client_id or ''}"


def group_app(group: str) -> str:
    """The app of a :func:`waiter_group`."""
    return group.partition("\n")[0]


class Wakeup(asyncio.Event):
    """A waiter's event; ``group`` waiters compete for the same messages.

    Besides being set, it collects the partitions named by the notifications that woke
    it (:meth:`take`), so a fetcher can look at just those instead of every partition.
    """

    def __init__(self, group: str | None) -> None:
        super().__init__()
        self.group = group
        self._hints: set[int] = set()
        self._full = False  # woken without a partition: everything must be re-checked
        self.armed = False  # its subscription was confirmed (it has looked, or will look)
        # the consumer groups it leases for (None: unknown, woken by every notification)
        self.serves: frozenset[str] | None = None
        # while parked: how many messages each group could take now (see park)
        self.capacity: dict[str, int] = {}
        # groups with a consumer that takes whatever comes, parked or not (see stream)
        self.streaming: frozenset[str] = frozenset()
        self.claims: set[str] = set()  # groups claimed for it since it last parked
        self.parked_at: float | None = None  # loop time it parked (None: leasing)

    def park(
        self, capacity: dict[str, int], serves: Iterable[str] = (), settled: Iterable[str] = ()
    ) -> set[str]:
        """The waiter is about to wait, leasing for nothing until woken: it would take
        ``capacity[group]`` messages of each shared group (consumer id) at once, and serves
        those groups and ``serves``. Appends of this process may claim the capacity
        (:meth:`Notifier.claim`); another process's claims of every group it serves do not
        wake it.

        Returns the groups claimed for it since it last parked that it leaves behind: no
        room for them now (a consumer left, paused, stopped reading) and not ``settled``
        (a lease since the claim found nothing more in the group). The caller then
        announces the topic (:meth:`Notifier.announce`), so other processes look now
        rather than :data:`CLAIM_GRACE` later."""
        self.serves = frozenset(capacity).union(serves, self.streaming)
        self.capacity = {group: n for group, n in capacity.items() if n > 0}
        self.parked_at = asyncio.get_running_loop().time()
        return self.left_behind(settled)

    def left_behind(self, settled: Iterable[str] = ()) -> set[str]:
        """The groups claimed for the waiter since it last asked that it cannot take now
        (see :meth:`park`); forgets the claims."""
        claims, self.claims = self.claims, set()
        if not claims:
            return claims
        return claims.difference(self.capacity, self.streaming, settled)

    def unpark(self) -> None:
        """The waiter is leasing again: nothing can be claimed for it until it parks
        (but for its streaming groups)."""
        self.capacity = {}
        self.parked_at = None

    def stream(self, groups: Iterable[str]) -> None:
        """``groups`` have a consumer taking whatever comes (a streaming session ready
        for more): this process's appends may claim them whether the waiter is parked or
        busy — it leases again after what it is doing, having been notified."""
        self.streaming = frozenset(groups)
        if self.serves is not None:
            self.serves |= self.streaming

    def hint(self, partition: int | None) -> None:
        """Set the event for ``partition`` (None: for anything)."""
        if partition is None:
            self._full = True
        else:
            self._hints.add(partition)
        self.capacity = {}
        self.parked_at = None
        self.set()

    def forget(self, partition: int) -> None:
        """Drop ``partition`` from the hints (the event stays set: a look at nothing is free)."""
        self._hints.discard(partition)

    def take(self) -> set[int] | None:
        """Clear the event; the partitions it was set for, or None when a notification
        named none (the caller re-checks everything)."""
        self.clear()
        hints, full = self._hints, self._full
        self._hints, self._full = set(), False
        return None if full else hints


class _Link:
    """One pub/sub connection and the subscriptions it carries.

    ``confirmed`` maps a channel to the future of its SUBSCRIBE (done once Redis confirmed
    it); ``rewake`` holds channels subscribed again for topics whose waiters must look
    again once the confirmation arrives.
    """

    def __init__(self, pubsub: object) -> None:
        self.pubsub = pubsub
        self.confirmed: dict[str, asyncio.Future[None]] = {}
        self.rewake: set[str] = set()
        self.alive = True

    def confirm(self, channel: str) -> bool:
        """Redis confirmed ``channel``; whether its waiters must look again."""
        fut = self.confirmed.get(channel)
        if fut is not None and not fut.done():
            fut.set_result(None)
        if channel in self.rewake:
            self.rewake.discard(channel)
            return True
        return False

    def is_confirmed(self, channel: str) -> bool:
        fut = self.confirmed.get(channel)
        return (
            self.alive
            and fut is not None
            and fut.done()
            and not fut.cancelled()
            and (fut.exception() is None)
        )

    def lose(self) -> None:
        """Fail every pending confirmation; the link is never used again."""
        self.alive = False
        for fut in self.confirmed.values():
            if not fut.done():
                fut.set_exception(_LinkLost())
                fut.exception()  # retrieved: nobody may be waiting on it any more
        self.confirmed.clear()
        self.rewake.clear()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()  # type: ignore[attr-defined]


class Notifier:
    """Fans topic notifications out to in-process waiters.

    Waiters without a group are all woken by every notification. Waiters of one group
    (one consumer group competing for the same partitions) are woken one at a time: the
    first idle one per notification gets it with the partition it names (a busy one when
    none is idle: it looks at the partition when it is done). A waiter that takes
    messages and leaves hands the partitions it did not get to on to the next waiter
    (:meth:`pass_on`). A notification so costs one fetcher of a group one look at one
    partition, instead of every parked fetcher re-reading every partition.
    """

    def __init__(self, client: AnyRedis) -> None:
        self._client = client
        self._waiters: dict[str, list[Wakeup]] = defaultdict(list)
        # parked waiters per (topic, app) and in all: the park limits, asked per fetch
        self._parked_apps: dict[tuple[str, str], int] = {}
        self._parked_total = 0
        self._generation = 0  # bumped whenever a link is lost
        self._unnamed: dict[str, int] = defaultdict(int)  # notifications naming no partition
        self._link: _Link | None = None  # the live link; None while (re)connecting
        self._linked = asyncio.Event()  # set while there is a live link
        self._task: asyncio.Task[None] | None = None
        self.reconnects = 0  # links lost (for tests and metrics)
        # names this process in the claims its appends make (unique per notifier: two
        # processes sharing one would only wake each other as without claims)
        self.origin = secrets.token_hex(6)
        self._skipped: dict[str, dict[Wakeup, set[int | None]]] = {}  # topic -> woken late
        self.claims_made = 0  # notifications this process claimed groups in (metrics)
        self.wakes_skipped = 0  # waiters not woken for another process's claim (metrics)
        self.claims_left = 0  # announcements of claims a waiter left behind (metrics)
        self._sequence = itertools.count(1)  # early claims of this process (claim(early=))
        self._early: dict[int, list[Wakeup]] = {}  # early claim -> waiters already woken

    def stamp(self, topic: str) -> tuple[int, int] | None:
        """While ``topic``'s notifications are being received: a value that changes with every
        notification naming no partition (a retry added or made due) and with every lost
        connection — so "nothing changed since" can be told without asking Redis. None when
        they are not being received."""
        link = self._link
        if link is None or not link.is_confirmed(notify_channel(topic)):
            return None
        return self._generation, self._unnamed[topic]

    def parked(self, topic: str) -> int:
        """Waiters currently parked on ``topic``."""
        return len(self._waiters.get(topic, ()))

    def parked_for(self, topic: str, app: str) -> int:
        """Waiters of ``app``'s groups currently parked on ``topic`` (O(1))."""
        return self._parked_apps.get((topic, app), 0)

    @property
    def total_parked(self) -> int:
        """Waiters currently parked on any topic (O(1): it was a sum over the topics)."""
        return self._parked_total

    @property
    def connected(self) -> bool:
        """Whether notifications are being received right now."""
        return self._link is not None

    def _ensure_started(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="engine-notifier")

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        link, self._link = self._link, None
        self._linked.clear()
        if link is not None:
            link.lose()
            await link.close()
        self._generation += 1

    async def _subscribe(self, topic: str) -> None:
        """Return once Redis confirmed ``topic``'s channel on the live link (waiting for a
        link while there is none); ConnectionError after :data:`CONFIRM_TIMEOUT`."""
        self._ensure_started()
        channel = notify_channel(topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONFIRM_TIMEOUT
        while True:
            remaining = deadline - loop.time()
            link = self._link
            try:
                async with asyncio.timeout(max(0.0, remaining)):
                    if link is None:
                        await self._linked.wait()
                        continue
                    fut = link.confirmed.get(channel)
                    if fut is None:
                        fut = link.confirmed[channel] = loop.create_future()
                        try:
                            await link.pubsub.subscribe(channel)  # type: ignore[attr-defined]
                        except Exception:
                            self._abandon(link, "a SUBSCRIBE failed")
                            continue
                    await asyncio.shield(fut)
                    return
            except _LinkLost:
                continue  # the next link subscribes this topic: wait for it
            except TimeoutError:
                if link is not None and link is self._link:
                    self._abandon(link, f"no confirmation of {channel} in {CONFIRM_TIMEOUT:g}s")
                raise RedisConnectionError(
                    f"notifications of {topic} unavailable for {CONFIRM_TIMEOUT:g}s"
                ) from None

    @contextlib.asynccontextmanager
    async def watch(self, topic: str, group: str | None = None) -> AsyncIterator[Wakeup]:
        """An event set when ``topic`` gets a notification while inside the block.

        Without ``group`` every notification sets it; with one, see the class docstring
        (call :meth:`pass_on` after taking messages).
        """
        event = Wakeup(group)
        self._waiters[topic].append(event)
        counted = (topic, group_app(group)) if group is not None else None
        if counted is not None:
            self._parked_apps[counted] = self._parked_apps.get(counted, 0) + 1
        self._parked_total += 1
        try:
            await self._subscribe(topic)
            event.armed = True
            yield event
        finally:
            self._parked_total -= 1
            if counted is not None:
                left = self._parked_apps[counted] - 1
                if left:
                    self._parked_apps[counted] = left
                else:
                    del self._parked_apps[counted]
            waiters = self._waiters.get(topic)
            if waiters is not None:
                with contextlib.suppress(ValueError):
                    waiters.remove(event)
                if not waiters:
                    del self._waiters[topic]

    def pass_on(
        self, topic: str, event: Wakeup, extra: Iterable[int] = (), taken: int | None = None
    ) -> None:
        """``event``'s waiter took messages (from partition ``taken``, now locked for its
        group, so no other waiter of the group need look there) and is leaving: hand the
        partitions it was woken for and did not look at, and ``extra`` ones (known to hold
        more), to the next waiter of its group."""
        if event.group is None:
            return
        if taken is not None:
            for other in self._waiters.get(topic, ()):
                if other.group == event.group:
                    other.forget(taken)
        left = event.take()
        if left is not None:
            left.update(extra)
            if not left:
                return
        idle = busy = None
        for other in self._waiters.get(topic, ()):
            if other is event or other.group != event.group:
                continue
            if not other.is_set():
                idle = other
                break
            busy = busy or other
        target = idle or busy
        if target is None:
            return
        if left is None:
            target.hint(None)
        else:
            for partition in left:
                target.hint(partition)

    def claim(self, topic: str, partition: int, count: int, *, early: bool = False) -> str:
        """The notification an append of ``count`` messages to ``topic``/``partition`` by
        this process publishes: the partition, and the groups a parked waiter of this
        process will take them for (its capacity is spent on them), so other processes
        need not wake theirs (see the module docstring).

        ``early``: the append's script is queued in this loop turn on the connection every
        lease goes on (a single Redis, pipelined: :mod:`brokers.engine.coalesce`), so
        whatever the claiming waiters lease after this turn runs after it in Redis. Those
        parked for at least :data:`EARLY_IDLE` are woken in the next turn, without waiting
        for the append's reply and its notification — one round trip sooner (0.3 ms after
        an idle spell here); the notification then does not wake them again but
        :data:`CLAIM_GRACE` later (a lease that ran first after all — the connection was
        replaced meanwhile, or the append met NOSCRIPT after a Redis restart and went
        again — looks again then). A waiter that parked just now is busy: it
        waits for the notification, by which time the appends of a round trip have come
        together for one lease (woken early for each, one RPC process leased half as much
        again per call and served 15% fewer calls)."""
        claimed: list[str] = []
        claimants: list[Wakeup] = []
        idle_since = asyncio.get_running_loop().time() - EARLY_IDLE if early else 0.0
        for event in self._waiters.get(topic, ()):
            took = False
            for group in event.streaming:
                if group not in claimed:
                    claimed.append(group)
                    event.claims.add(group)
                    took = True
            capacity = event.capacity
            for group, n in capacity.items():
                if n >= count and group not in claimed:
                    capacity[group] = n - count
                    claimed.append(group)
                    event.claims.add(group)
                    took = True
            parked = event.parked_at
            if took and early and parked is not None and parked <= idle_since:
                claimants.append(event)
        if not claimed:
            return str(partition)
        self.claims_made += 1
        origin = self.origin
        if claimants:
            seq = next(self._sequence)
            origin = f"{origin}/{seq}"
            self._early[seq] = claimants
            if len(self._early) > EARLY_KEPT:  # appends that never published (refused)
                del self._early[next(iter(self._early))]
            asyncio.get_running_loop().call_soon(self._wake_early, topic, partition, claimants)
        return notice(partition, origin, claimed)

    def _wake_early(self, topic: str, partition: int, claimants: list[Wakeup]) -> None:
        waiters = self._waiters.get(topic, ())
        for event in claimants:
            if event in waiters:
                event.hint(partition)

    async def announce(self, topic: str) -> None:
        """Wake ``topic``'s waiters in every process, for any partition (a waiter left
        claims behind: :meth:`Wakeup.park`). A Redis error is only logged: the skipped
        waiters look :data:`CLAIM_GRACE` after the claims anyway."""
        self.claims_left += 1
        try:
            await announce(self._client, topic, None)
        except (RedisError, OSError) as exc:
            log.info("could not announce %s for claims left behind: %s", topic, exc)

    def _wake(
        self,
        topic: str,
        partition: int | None,
        claimed: frozenset[str] = frozenset(),
        woken_early: list[Wakeup] | None = None,
    ) -> None:
        waiters = self._waiters.get(topic)
        if not waiters:
            return
        woken: set[str] = set()
        busy: dict[str, Wakeup] = {}
        for event in waiters:
            group = event.group
            if group is None:
                serves = event.serves
                if (claimed and serves is not None and serves <= claimed) or (
                    woken_early and event in woken_early  # see claim(early=True)
                ):
                    self._skip(topic, event, partition)
                    continue
                event.hint(partition)
            elif group not in woken:
                if not event.is_set():
                    woken.add(group)
                    event.hint(partition)
                else:
                    busy.setdefault(group, event)
        for group, event in busy.items():
            if group not in woken:
                event.hint(partition)

    def _skip(self, topic: str, event: Wakeup, partition: int | None) -> None:
        """Wake ``event`` :data:`CLAIM_GRACE` seconds from now, for ``partition``."""
        self.wakes_skipped += 1
        pending = self._skipped.get(topic)
        if pending is None:
            pending = self._skipped[topic] = {}
            asyncio.get_running_loop().call_later(CLAIM_GRACE, self._wake_skipped, topic)
        pending.setdefault(event, set()).add(partition)

    def _wake_skipped(self, topic: str) -> None:
        pending = self._skipped.pop(topic, {})
        waiters = self._waiters.get(topic, ())
        for event, partitions in pending.items():
            if event in waiters:
                for partition in partitions:
                    event.hint(partition)

    def _wake_all(self) -> None:
        """A link was lost: every waiter re-checks everything."""
        for waiters in self._waiters.values():
            for event in waiters:
                event.hint(None)

    def _wake_topic(self, topic: str) -> None:
        """``topic`` is subscribed again: its waiters that were parked under the lost link
        look again (those still subscribing look anyway once confirmed)."""
        for event in self._waiters.get(topic, ()):
            if event.armed:
                event.hint(None)

    def _abandon(self, link: _Link, why: str) -> None:
        """Stop using ``link`` (the reader task notices and makes a new one)."""
        if not link.alive:
            return
        log.warning("notification connection abandoned: %s", why)
        self._lose(link)
        asyncio.get_running_loop().create_task(link.close())

    def _lose(self, link: _Link) -> None:
        if not link.alive:
            return
        link.lose()
        if self._link is link:
            self._link = None
            self._linked.clear()
        self._generation += 1
        self.reconnects += 1
        self._wake_all()

    async def _connect(self) -> _Link:
        """A new live link subscribed to the sentinel and every topic with waiters;
        retried with a short backoff until Redis answers."""
        delay = 0.0
        started = time.monotonic()
        failures = 0
        while True:
            pubsub = open_pubsub(self._client)
            link = _Link(pubsub)
            topics = list(self._waiters)
            loop = asyncio.get_running_loop()
            for topic in topics:
                channel = notify_channel(topic)
                link.confirmed[channel] = loop.create_future()
                link.rewake.add(channel)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    await pubsub.subscribe(_SENTINEL, *link.confirmed)
            except asyncio.CancelledError:
                link.lose()
                await link.close()
                raise
            except Exception as exc:
                link.lose()
                await link.close()
                failures += 1
                if failures == 1:
                    log.warning("notification connection unavailable (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(RECONNECT_MAX, max(RECONNECT_MIN, delay * 2))
                continue
            if failures:
                log.warning(
                    "notification connection back after %.2fs (%d failed attempts)",
                    time.monotonic() - started,
                    failures,
                )
            self._link = link
            self._linked.set()
            return link

    async def _run(self) -> None:
        while True:
            link = await self._connect()
            try:
                await self._read(link)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection lost: wake everyone, reconnect at once
                if link.alive:
                    log.warning("notification connection lost (%s); waking waiters", exc)
            self._lose(link)
            await link.close()

    async def _read(self, link: _Link) -> None:
        prefix = notify_channel("")
        pubsub = link.pubsub
        while link.alive:
            # blocking read: no poll timer per message (a busy broker gets thousands)
            msg = await pubsub.get_message(timeout=None)  # type: ignore[attr-defined]
            if msg is None or not link.alive:
                continue
            channel = msg.get("channel")
            if isinstance(channel, bytes):
                channel = channel.decode()
            kind = msg.get("type")
            if isinstance(kind, bytes):
                kind = kind.decode()
            if kind == "subscribe":
                if link.confirm(channel) and channel.startswith(prefix):
                    self._wake_topic(channel[len(prefix) :])
            elif kind == "message" and channel.startswith(prefix):
                topic = channel[len(prefix) :]
                partition, origin, claimed = parse_notice(msg.get("data"))
                if partition is None:
                    self._unnamed[topic] += 1
                early = None
                if origin.partition("/")[0] == self.origin:
                    claimed = frozenset()
                    if "/" in origin:
                        early = self._early.pop(int(origin.partition("/")[2]), None)
                self._wake(topic, partition, claimed, early)


async def announce(client: AnyRedis, topic: str, partition: int | None) -> None:
    """Tell ``topic``'s waiters in every process that messages are servable now, as an
    append's script does (``None``: on any partition) — for what makes them servable
    outside such a script: a release, an offset reset, a claim handed back. On a single
    Redis it goes on the pipelined connection, after the scripts queued there before it
    (a handed-back claim's append: on another connection the announcement could overtake
    it and wake the others to find nothing)."""
    await command(client, "PUBLISH", notify_channel(topic), "" if partition is None else partition)


def notice(partition: int, origin: str, claimed: Iterable[str]) -> str:
    """A notification naming ``partition`` whose messages the process ``origin`` takes for
    the ``claimed`` groups (consumer ids: names without spaces)."""
    return " ".join((str(partition), origin, *claimed))


def parse_notice(data: object) -> tuple[int | None, str, frozenset[str]]:
    """(partition, claiming process, claimed groups) of a notification; partition None
    when it names none ("", "retry", anything unreadable), origin "" when none claimed."""
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    if isinstance(data, int):
        return data, "", frozenset()
    if not isinstance(data, str):
        return None, "", frozenset()
    head, _, rest = data.partition(" ")
    try:
        partition: int | None = int(head)
    except ValueError:
        partition = None
    if not rest:
        return partition, "", frozenset()
    origin, _, groups = rest.partition(" ")
    return partition, origin, frozenset(groups.split()) if groups else frozenset()
