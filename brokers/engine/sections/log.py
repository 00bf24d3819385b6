"""The log: appending (atomic batches, independent messages, a bounded topic's overflow
policy) and reading partitions by index, and retention.

A section of the :class:`~brokers.engine.engine.Engine` facade (a mixin on its shared state).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from time import perf_counter

from brokers.engine.access import foreign_dead_letter_queue
from brokers.engine.append import append_blob, choose_partition, guess_indexes, pack_records
from brokers.engine.band_bound import backlog_elsewhere
from brokers.engine.catalog import (
    TopicInfo,
)
from brokers.engine.errors import (
    EngineError,
    InvalidMessage,
    QueueFull,
    RateLimited,
)
from brokers.engine.joined_appends import Sources
from brokers.engine.model import (
    AppendResult,
    Delivery,
    QoS,
    StoredEntry,
)
from brokers.engine.overflow import FULL, REDIRECT, append_bounded
from brokers.engine.priority import band_partition, is_prioritized
from brokers.engine.read import (
    bounds,
    index_at_time,
    indexes_at_times,
    read_entries,
    read_range,
)
from brokers.engine.record import (
    Message,
    RecordEncoder,
    encode_record,
    split_blob,
)
from brokers.engine.retention import (
    record_losses,
    settle_losses,
    trim_topics,
    unsettled_losses,
)
from brokers.engine.sections.base import EngineBase, how_many
from brokers.engine.wire import WireBlob, WireRecords, check_wire, stamp_wire, wire_records


class LogSection(EngineBase):
    """The log."""

    async def append(
        self,
        topic: str,
        app: str,
        messages: Sequence[Message | bytes] | WireRecords | WireBlob,
        *,
        partition: int | None = None,
        qos: QoS = QoS.RECEIVED,
        client_address: str | None = None,
        as_leader: int | None = None,
    ) -> AppendResult:
        """Append messages to one partition: Message objects, JMQ4 BrokerMessage bytes,
        :class:`WireRecords` (from :meth:`check_wire`, the messages as one checked blob) or a
        :class:`WireBlob` (records as received, checked and stamped here in one walk).

        The gate checks ``app``'s producer policy first (policy, blacklisted
        ``client_address``, rate limit for every message of the call, all or none). The
        call is atomic; it returns once Redis accepted the write with the ``qos``
        durability. ``partition`` None/-1 lets the engine choose (see append.py).

        ``as_leader``: the broker appends as the partition's leader (JMQ4); Redis refuses
        the write atomically with :class:`BrokerNotLeader` when it records another
        leader for the partition (a stale catalog, see :mod:`brokers.engine.leadership`).
        """
        started = perf_counter()
        try:
            if not messages:
                raise InvalidMessage("no messages")
            policy = self.gate.producer(topic, app, client_address)
            stored = await self._append(
                topic,
                app,
                messages,
                partition=partition,
                qos=qos,
                client_address=client_address,
                rate_limited=self.gate.limits_produce(policy),
                as_leader=as_leader,
            )
        except Exception as exc:
            count = max(1, how_many(messages))
            if isinstance(exc, EngineError):
                self._refused(topic, app, exc, count)
            self.produce_latencies.failed(topic, app, client_address, count)
            raise
        self.produce_latencies.stored(
            topic, app, client_address, perf_counter() - started, how_many(messages)
        )
        return stored

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
        as_leader: int | None = None,
        sources: Sources | None = None,
    ) -> AppendResult:
        """:meth:`append` past the gate's policy check (a delayed message is appended
        so when due: it was checked when it was accepted). ``rate_limited``: take the
        producer's permits for the messages before storing them. ``sources``: the
        messages' client addresses, by runs (a joined append), in place of
        ``client_address``."""
        snap = self._catalog()
        info = self.topic(topic)
        policy = snap.producer(topic, app)
        wire = isinstance(messages, WireRecords | WireBlob)
        first = None if wire else messages[0]  # type: ignore[index]
        chosen = self._choose_partition(
            snap,
            info,
            policy,
            app,
            partition,
            messages.blob if wire else first,  # type: ignore[union-attr]
            first.business_id if isinstance(first, Message) else "",
        )
        now = self.now_ms()
        slot = (topic, chosen)
        seen, guess = self._guess(slot)
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
            if sources is None:
                records = self._encode(messages, app, chosen, now, client_address)  # type: ignore[arg-type]
            else:
                records, at = [], 0
                for count, address in sources:
                    records += self._encode(messages[at : at + count], app, chosen, now, address)  # type: ignore[arg-type,index]
                    at += count
            blob = pack_records(records, max(0, guess))
            counts = [count for _, count in records]
            total = sum(counts)
        if guess >= 0:  # the next call guesses past this one while it is in flight
            self._next_guess[slot] = guess + total
        try:
            if rate_limited and policy is not None:
                await self.gate.admit_produce(policy, total)
            if info.queue.max_queue_size is not None:  # a bounded topic: the overflow policy
                [verdict] = await self._append_bounded(info, chosen, [(blob, total)], qos)
                if not isinstance(verdict, int):
                    self._next_guess.pop(slot, None)  # nothing appended: guess from the seen
                    return await self._overflowed(info, app, chosen, blob, verdict, now, qos)
                first_index = verdict
            else:
                first_index = await append_blob(
                    self.redis,
                    self.durability,
                    topic,
                    chosen,
                    blob,
                    total,
                    qos,
                    expected_first=guess,
                    leader=as_leader,
                    notice=self.notifier.claim(
                        topic, chosen, total, early=self.durability.pipelined(qos)
                    ),
                    seen_next=seen,
                )
        except BaseException:
            self._next_guess.pop(slot, None)  # its indexes were not taken: guess from the seen
            raise
        end = first_index + total
        self._saw_append(slot, seen, guess, first_index, end)
        if total == len(counts):
            indexes = tuple(range(first_index, end))
        else:
            indexes, pos = [], first_index
            for count in counts:
                indexes.append(pos)
                pos += count
        self.counters.record(
            topic=topic, app=app, broker=self.broker_id, produced=total, produced_bytes=len(blob)
        )
        return AppendResult(topic, chosen, first_index, tuple(indexes), total, now)

    def _guess(self, slot: tuple[str, int]) -> tuple[int, int]:
        """(the next index last seen stored in ``slot``, the index the next append there
        guesses it gets): past the appends still in flight, never below the one seen;
        −1 when nothing is known yet."""
        seen = self._next_seen.get(slot, -1)
        guess = self._next_guess.get(slot, -1)
        return seen, guess if guess > seen else seen

    def _saw_append(
        self, slot: tuple[str, int], seen: int, guess: int, first: int, end: int
    ) -> None:
        """Remember what an append of ``slot`` got (``first`` .. ``end``), having guessed
        ``guess`` when the partition's next index last seen stored was ``seen``.

        Concurrent appends to one partition each guess past the ones still in flight
        (``_next_guess``), so the script finds its records already carrying their indexes
        and does not rewrite them in Lua (93 of its 100 µs per call of 32 when every
        concurrent call guessed the same index). A wrong guess (Redis ran them in another
        order, another process appended, a call in flight failed) moves the guess to the
        end of what is known to be taken; a first index below the one seen (the partition
        was emptied and begun again) starts both over from the truth."""
        if first < seen:
            self._next_seen[slot] = end
            self._next_guess[slot] = end
            return
        if end > self._next_seen.get(slot, -1):
            self._next_seen[slot] = end
        if first != guess and end > self._next_guess.get(slot, -1):
            self._next_guess[slot] = end

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
        started = perf_counter()
        try:
            out = await self._append_many(
                topic, app, messages, partition=partition, qos=qos, client_address=client_address
            )
        except Exception:
            self.produce_latencies.failed(topic, app, client_address, len(messages))
            raise
        failed = sum(1 for r in out if isinstance(r, EngineError))
        self.produce_latencies.failed(topic, app, client_address, failed)
        self.produce_latencies.stored(
            topic, app, client_address, perf_counter() - started, len(out) - failed
        )
        return out

    async def _append_many(
        self,
        topic: str,
        app: str,
        messages: Sequence[Message],
        *,
        partition: int | None,
        qos: QoS,
        client_address: str | None,
    ) -> list[AppendResult | EngineError]:
        """:meth:`append_many` of a non-empty list, not timed."""
        try:
            policy = self.gate.producer(topic, app, client_address)
            info = self.topic(topic)
        except EngineError as exc:
            self._refused(topic, app, exc, len(messages))
            raise
        if (partition is None or partition < 0) and is_prioritized(info):
            return await self._append_many_banded(  # each band's call counts its refusals
                info, app, messages, qos=qos, client_address=client_address
            )
        admitted = len(messages)
        limited = self.gate.limits_produce(policy)
        if limited:
            admitted = await self.gate.admit_produce_up_to(policy, len(messages))
            cut = len(messages) - admitted
            self.counters.refused(topic=topic, app=app, kind="rate_limited", count=cut)
        out: list[AppendResult | EngineError] = []
        args = {"partition": partition, "qos": qos, "client_address": client_address}
        if info.queue.max_queue_size is not None:
            out = await self._append_many_bounded(info, app, messages[:admitted], **args)
            if limited:
                refused = RateLimited(self.gate.over_limit(policy))
                out.extend(refused for _ in messages[admitted:])
            return out
        try:
            stored = await self._append_joined(topic, app, messages[:admitted], **args)
            out.extend(
                AppendResult(topic, stored.partition, i, (i,), 1, stored.store_time_ms)
                for i in stored.indexes
            )
        except InvalidMessage:  # find the bad ones: the others are stored one by one
            for message in messages[:admitted]:
                try:
                    out.append(await self._append(topic, app, [message], **args))
                except InvalidMessage as exc:
                    self._refused(topic, app, exc)
                    out.append(exc)
        refused = RateLimited(self.gate.over_limit(policy))
        out.extend(refused for _ in messages[admitted:])
        return out

    async def _append_joined(
        self,
        topic: str,
        app: str,
        messages: Sequence[Message],
        *,
        partition: int | None,
        qos: QoS,
        client_address: str | None,
    ) -> AppendResult:
        """:meth:`_append` of messages the gate let through, joined with the other
        appends made to the same partition (by the same app, with the same durability)
        in this loop turn (:mod:`~brokers.engine.joined_appends`). The
        partition is chosen here, per call, as it would be unjoined."""
        snap = self._catalog()
        first = messages[0]
        chosen = self._choose_partition(
            snap,
            self.topic(topic),
            snap.producer(topic, app),
            app,
            partition,
            first,
            first.business_id,
        )
        return await self._joiner.append((topic, app, chosen, qos), messages, client_address)

    async def _send_joined(
        self, key: Hashable, messages: Sequence[Message], sources: Sources
    ) -> AppendResult:
        """The joiner's one Redis call for ``key`` (topic, app, partition, qos)."""
        topic, app, partition, qos = key  # type: ignore[misc]
        return await self._append(
            topic, app, messages, partition=partition, qos=qos, client_address=None, sources=sources
        )

    async def _append_many_banded(
        self,
        info: TopicInfo,
        app: str,
        messages: Sequence[Message],
        *,
        qos: QoS,
        client_address: str | None,
    ) -> list[AppendResult | EngineError]:
        """:meth:`append_many` on a priority topic: each band's messages go to its
        partition (in their order), the results in the order of ``messages``."""
        bands: dict[int, list[int]] = {}
        for i, message in enumerate(messages):
            bands.setdefault(band_partition(info, message.priority), []).append(i)
        out: list[AppendResult | EngineError | None] = [None] * len(messages)
        for band, positions in bands.items():
            results = await self._append_many(
                info.code,
                app,
                [messages[i] for i in positions],
                partition=band,
                qos=qos,
                client_address=client_address,
            )
            for i, result in zip(positions, results, strict=True):
                out[i] = result
        return [r for r in out if r is not None]

    async def _append_bounded(
        self, info: TopicInfo, partition: int, units: Sequence[tuple[bytes, int]], qos: QoS
    ) -> list[int | str]:
        """Store ``units`` in ``partition`` under the topic's bound: over the whole queue —
        a priority topic's every band (:mod:`~brokers.engine.band_bound`)."""
        group_ids = self._group_ids(info)
        max_size = info.queue.max_queue_size or 0
        others: list[int] = []
        if is_prioritized(info) and info.partitions > 1:
            others = await backlog_elsewhere(
                self.redis,
                self.durability,
                info.code,
                info.partitions,
                partition,
                group_ids,
                units=len(units),
                max_size=max_size,
                policy=info.queue.overflow_policy,
                qos=qos,
            )
        return await append_bounded(
            self.redis,
            self.durability,
            info.code,
            partition,
            group_ids,
            units,
            max_size=max_size,
            policy=info.queue.overflow_policy,
            qos=qos,
            elsewhere=others,
            notice=self.notifier.claim(
                info.code, partition, sum(n for _, n in units), early=self.durability.pipelined(qos)
            ),
        )

    async def _overflowed(
        self,
        info: TopicInfo,
        app: str,
        partition: int,
        blob: bytes,
        verdict: str,
        now: int,
        qos: QoS,
    ) -> AppendResult:
        """A message the bound did not let in: refused, dropped or redirected to the DLQ."""
        if verdict == FULL:
            raise QueueFull(f"queue {info.code} is full ({info.queue.max_queue_size})")
        if verdict == REDIRECT:
            foreign = foreign_dead_letter_queue(self._catalog(), info)
            if foreign is not None:  # refused rather than handed to another team
                raise QueueFull(
                    f"queue {info.code} is full and its dead-letter queue {foreign} is"
                    " another team's queue"
                )
            for record in split_blob(blob):
                await self._to_topic_dlq(
                    info.code, app, record, reason="QueueOverflow", attempts=0, qos=qos
                )
            return AppendResult(info.code, partition, -1, (), 0, now, dead_lettered=True)
        return AppendResult(info.code, partition, -1, (), 0, now, dropped=True)

    async def _append_many_bounded(
        self,
        info: TopicInfo,
        app: str,
        messages: Sequence[Message],
        *,
        partition: int | None,
        qos: QoS,
        client_address: str | None,
    ) -> list[AppendResult | EngineError]:
        """:meth:`append_many` on a bounded topic: each message meets the overflow policy
        in turn, in one script call."""
        snap = self._catalog()
        chosen = choose_partition(
            snap,
            info,
            snap.producer(info.code, app),
            partition=partition,
            turns=self._turns,
            app=app,
        )
        now = self.now_ms()
        results: list[AppendResult | EngineError | None] = [None] * len(messages)
        units: list[tuple[bytes, int]] = []
        positions: list[int] = []
        for pos, message in enumerate(messages):
            try:
                units.append(
                    encode_record(
                        message,
                        app=app,
                        partition=chosen,
                        now_ms=now,
                        client_address=client_address,
                        max_body=self.max_body,
                    )
                )
            except EngineError as exc:
                self._refused(info.code, app, exc)
                results[pos] = exc
                continue
            positions.append(pos)
        if not units:
            return [r for r in results if r is not None]
        slot = (info.code, chosen)
        seen, guess = self._guess(slot)
        if guess >= 0:  # each unit carries the index it gets if none is dropped before it
            units = guess_indexes(units, guess)
            self._next_guess[slot] = guess + sum(count for _, count in units)
        try:
            verdicts = await self._append_bounded(info, chosen, units, qos)
        except BaseException:
            self._next_guess.pop(slot, None)
            raise
        stored = [
            (v, count) for v, (_, count) in zip(verdicts, units, strict=True) if isinstance(v, int)
        ]
        if stored:
            self._saw_append(slot, seen, guess, stored[0][0], stored[-1][0] + stored[-1][1])
        if len(stored) < len(units):  # what was guessed for those not stored was not taken
            self._next_guess.pop(slot, None)
        produced = size = 0
        for pos, (record, count), verdict in zip(positions, units, verdicts, strict=True):
            if isinstance(verdict, int):
                produced, size = produced + count, size + len(record)
                results[pos] = AppendResult(info.code, chosen, verdict, (verdict,), count, now)
            else:
                try:
                    results[pos] = await self._overflowed(
                        info, app, chosen, record, verdict, now, qos
                    )
                except QueueFull as exc:
                    self._refused(info.code, app, exc)
                    results[pos] = exc
        if produced:
            self.counters.record(
                topic=info.code,
                app=app,
                broker=self.broker_id,
                produced=produced,
                produced_bytes=size,
            )
        return [r for r in results if r is not None]

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

    async def produce_refusals(
        self, *, minutes: int = 60, app: str | None = None
    ) -> dict[tuple[str, str], dict[str, int]]:
        """The messages the engine refused to each producer ``(topic, app)`` in the last
        ``minutes`` whole minutes and the current one, by why (over its rate limit, too
        large, invalid, not allowed, its queue full: what the producer can change) — over
        any protocol, on any broker; producers without any left out, and those of other
        apps than ``app`` when given. Two round trips whatever the number of producers."""
        await self.counters.flush()
        now = self.now_ms()
        return await self.counters.refusals(
            start_ms=(now // 60_000 - minutes) * 60_000, end_ms=now + 1, app=app
        )

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

    async def indexes_at_times(
        self, topic: str, partitions: Sequence[int], times_ms: Sequence[int]
    ) -> list[list[int]]:
        """:meth:`index_at_time` of each of ``partitions`` for each of ``times_ms``, in one
        round trip whatever their number: per partition, its indexes in the order of
        ``times_ms`` (a span of time is a span of indexes of every partition at once)."""
        info = self.topic(topic)
        for p in partitions:
            self._partition(info, p)
        return await indexes_at_times(self.redis, topic, partitions, times_ms)

    async def trim(self, topic: str) -> dict[int, int]:
        """Apply the topic's retention to every partition; the new min index of each.
        What it took that a consumer had not read is recorded (:meth:`retention_losses`)."""
        return (await self._trim([self.topic(topic)]))[topic]

    async def trim_all(self) -> dict[str, dict[int, int]]:
        """Apply retention to every topic that has a limit (a thousand partitions per
        round trip)."""
        return await self._trim(
            [
                info
                for info in self._catalog().topics.values()
                if info.retention_max_age_s is not None or info.retention_max_count is not None
            ]
        )

    async def _trim(self, infos: Sequence[TopicInfo]) -> dict[str, dict[int, int]]:
        """Trim ``infos`` measuring what each consumer lost (each progress as its lag is
        measured: a broadcast consumer's active clients, a fan-out queue's members), and
        record the losses."""
        snap = self._catalog()
        known = [(i.code, c.app, i) for i in infos for c in snap.consumers_of(i.code)]
        clients = await self._progress_clients(known)
        progresses: dict[str, dict[str, list[str | None]]] = {i.code: {} for i in infos}
        for topic, app, _ in known:
            progresses[topic][app] = list(clients.get((topic, app)) or (None,))
        done = await trim_topics(
            self.redis, [(i, progresses[i.code]) for i in infos], self.now_ms()
        )
        await record_losses(
            self.redis,
            {
                (i.code, app): n
                for i, d in zip(infos, done, strict=True)
                for app, n in d.lost.items()
            },
        )
        return {i.code: d.mins for i, d in zip(infos, done, strict=True)}

    async def retention_losses(self) -> dict[tuple[str, str], int]:
        """Messages retention took before a consumer group ``(topic, app)`` read them,
        recorded by :meth:`trim` and not yet settled (groups without any left out)."""
        return await unsettled_losses(self.redis)

    async def settle_retention_losses(self, losses: dict[tuple[str, str], int]) -> None:
        """Take ``losses`` (what :meth:`retention_losses` returned, or part of it) off the
        recorded ones; what was recorded since stays."""
        await settle_losses(self.redis, losses)
