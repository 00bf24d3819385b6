"""An asyncio JMQ4 client: authenticated connections per broker, a metadata cache that
follows leadership (187/188), a producer (partition choice, batches, zlib, transactions)
and a consumer (fetch, process, ack with retry types).

Usage::

    async with Jmq4Client("127.0.0.1", 50088, app="orders", token="…") as client:
        await client.produce("order-created", [b"hello"])
        async for message in client.messages("order-created"):
            ...  # acked as it is handed over
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from brokers.clients.jmq4.connection import Jmq4Connection, Jmq4Error
from brokers.clients.jmq4.messages import (
    OutgoingMessage,
    ReceivedMessage,
    build_batch,
    build_message,
    expand,
)
from brokers.protocols.jmq4 import (
    AckEntry,
    AckPartition,
    AckTopic,
    AddConnectionRequest,
    AddConsumerRequest,
    AddProducerRequest,
    ClusterBroker,
    ClusterTopic,
    Code,
    CommitAckRequest,
    CommitRequest,
    FetchClusterRequest,
    FetchIndexRequest,
    FetchTopicMessageRequest,
    IndexTopic,
    Language,
    PrepareRequest,
    ProducedItem,
    ProduceMessageRequest,
    ProduceTopic,
    QosLevel,
    RemoveConnectionRequest,
    RetryType,
    RollbackRequest,
    TopicFetch,
)

PERMISSION_WRITE = 2
LEADER_CODES = (
    Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER,
    Code.FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER,
)
MAX_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic's FETCH_CLUSTER entry and the brokers it refers to."""

    topic: ClusterTopic
    brokers: dict[int, ClusterBroker]

    def leader(self, partition: int) -> int | None:
        """The broker id leading ``partition``."""
        for group in self.topic.partition_groups:
            if partition in group.partitions:
                return group.leader
        return None

    def leaders(self) -> list[int]:
        """Distinct leader broker ids, in group order."""
        return list(dict.fromkeys(g.leader for g in self.topic.partition_groups))

    def writable_partitions(self) -> list[int]:
        """Partitions whose leader is known and writable."""
        return [
            p
            for g in self.topic.partition_groups
            if (b := self.brokers.get(g.leader)) is not None and b.permission & PERMISSION_WRITE
            for p in g.partitions
        ]


def _items(messages: Iterable[bytes | OutgoingMessage]) -> list[OutgoingMessage]:
    return [m if isinstance(m, OutgoingMessage) else OutgoingMessage(bytes(m)) for m in messages]


class Jmq4Client:
    """A JMQ4 client for one app, bootstrapped from any broker of the cluster."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        app: str,
        token: str,
        region: str = "",
        compress: bool = True,
        timeout: float = 10.0,
    ) -> None:
        self.bootstrap = (host, port)
        self.app = app
        self.token = token
        self.region = region
        self.compress = compress
        self.timeout = timeout
        self._connections: dict[tuple[str, int], Jmq4Connection] = {}
        self._connect_lock = asyncio.Lock()
        self._metadata: dict[str, TopicMetadata] = {}
        self._registered: set[tuple[tuple[str, int], str, str]] = set()
        self._fetched_from: dict[tuple[str, int], tuple[str, int]] = {}
        self._rotation: dict[str, int] = defaultdict(int)
        self._rng = random.Random()

    async def __aenter__(self) -> Jmq4Client:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ connections

    async def connect(self) -> None:
        """Connect and authenticate to the bootstrap broker (Jmq4Error 2 on a bad token)."""
        await self.connection(self.bootstrap)

    async def connection(self, address: tuple[str, int]) -> Jmq4Connection:
        """An authenticated connection to ``address``, opened on first use."""
        conn = self._connections.get(address)
        if conn is not None and not conn.closed:
            return conn
        async with self._connect_lock:
            conn = self._connections.get(address)
            if conn is not None and not conn.closed:
                return conn
            conn = await Jmq4Connection.open(*address, time_limit=self.timeout)
            try:
                await conn.request(
                    AddConnectionRequest(
                        app=self.app,
                        token=self.token,
                        region=self.region,
                        language=Language.PYTHON,
                        version="mqcloud-python",
                    ),
                    time_limit=self.timeout,
                )
            except BaseException:
                await conn.close()
                raise
            self._registered = {r for r in self._registered if r[0] != address}
            self._connections[address] = conn
            return conn

    async def close(self) -> None:
        """Say goodbye to every broker and close the connections."""
        for conn in list(self._connections.values()):
            if not conn.closed:
                with contextlib.suppress(Jmq4Error, TimeoutError):
                    await conn.request(RemoveConnectionRequest(), time_limit=2.0)
            await conn.close()
        self._connections.clear()

    # ------------------------------------------------------------------ metadata

    async def metadata(self, topic: str, *, refresh: bool = False) -> TopicMetadata:
        """The cached FETCH_CLUSTER entry of ``topic`` (re-read when ``refresh``)."""
        cached = self._metadata.get(topic)
        if cached is not None and not refresh:
            return cached
        conn = await self.connection(self.bootstrap)
        frame = await conn.request(
            FetchClusterRequest(topics=(topic,), app=self.app), time_limit=self.timeout
        )
        entry = frame.payload.topics[0]
        if entry.code != Code.SUCCESS:
            raise Jmq4Error(entry.code, f"topic {topic}")
        meta = TopicMetadata(entry, {b.id: b for b in frame.payload.brokers})
        self._metadata[topic] = meta
        return meta

    @contextlib.contextmanager
    def _leader_link(self, topic: str) -> Iterator[None]:
        """Around a request to ``topic``'s leader: a leader that cannot be reached may have
        failed over, so the topic's cluster view is read again on the next call (not kept,
        naming the dead leader, until the process restarts)."""
        try:
            yield
        except (OSError, TimeoutError):
            self._metadata.pop(topic, None)
            raise
        except Jmq4Error as exc:
            if exc.code == Code.CN_CONNECTION_ERROR:
                self._metadata.pop(topic, None)
            raise

    def _address(self, meta: TopicMetadata, broker_id: int) -> tuple[str, int]:
        broker = meta.brokers.get(broker_id)
        if broker is None:
            raise Jmq4Error(Code.CN_SERVICE_NOT_AVAILABLE, f"broker {broker_id} unknown")
        return broker.host, broker.port

    async def _register(self, address: tuple[str, int], kind: str, topic: str) -> Jmq4Connection:
        conn = await self.connection(address)
        key = (address, kind, topic)
        if key not in self._registered:
            cls = AddProducerRequest if kind == "producer" else AddConsumerRequest
            await conn.request(cls(topics=(topic,), app=self.app), time_limit=self.timeout)
            self._registered.add(key)
        return conn

    # ------------------------------------------------------------------ produce

    async def produce(
        self,
        topic: str,
        messages: Sequence[bytes | OutgoingMessage],
        *,
        partition: int | None = None,
        batch: bool = False,
        ordered: bool = False,
        qos: QosLevel = QosLevel.RECEIVE,
        tx_id: str = "",
    ) -> Sequence[ProducedItem]:
        """Produce to one partition (random among writable ones unless given); follows the
        leader on 188. ``batch`` sends one batch message; returns one item per message (or
        one for the batch)."""
        items = _items(messages)
        for attempt in range(MAX_ATTEMPTS):
            meta = await self.metadata(topic, refresh=attempt > 0)
            chosen = partition
            if chosen is None:
                writable = meta.writable_partitions()
                if not writable:
                    raise Jmq4Error(
                        Code.FW_TOPIC_NO_PARTITIONGROUP, f"{topic}: no writable partition"
                    )
                chosen = self._rng.choice(writable)
            leader = meta.leader(chosen)
            if leader is None:
                raise Jmq4Error(Code.CN_PARAM_ERROR, f"{topic} has no partition {chosen}")
            if batch:
                wire = (build_batch(items, app=self.app, partition=chosen, compress=self.compress),)
            else:
                wire = tuple(
                    build_message(
                        m, app=self.app, partition=chosen, compress=self.compress, ordered=ordered
                    )
                    for m in items
                )
            with self._leader_link(topic):
                conn = await self.connection(self._address(meta, leader))
                frame = await conn.request(
                    ProduceMessageRequest(
                        topics=(
                            ProduceTopic(topic=topic, tx_id=tx_id, qos_level=qos, messages=wire),
                        ),
                        app=self.app,
                    ),
                    time_limit=self.timeout,
                )
            result = frame.payload.topics[0]
            if result.code in LEADER_CODES and attempt + 1 < MAX_ATTEMPTS:
                continue
            if result.code != Code.SUCCESS:
                raise Jmq4Error(result.code, f"produce to {topic}")
            return result.items
        raise AssertionError("unreachable")

    async def transaction(
        self, topic: str, *, transaction_id: str = "", timeout_ms: int = 0
    ) -> Transaction:
        """Open a transaction on ``topic`` (PREPARE); produce into it, then commit/rollback."""
        meta = await self.metadata(topic)
        writable = meta.writable_partitions()
        if not writable:
            raise Jmq4Error(Code.FW_TOPIC_NO_PARTITIONGROUP, f"{topic}: no writable partition")
        partition = self._rng.choice(writable)
        address = self._address(meta, meta.leader(partition))  # type: ignore[arg-type]
        with self._leader_link(topic):
            conn = await self._register(address, "producer", topic)
            frame = await conn.request(
                PrepareRequest(
                    topic=topic, app=self.app, transaction_id=transaction_id, timeout=timeout_ms
                ),
                time_limit=self.timeout,
            )
        if frame.payload.code != Code.SUCCESS:
            raise Jmq4Error(frame.payload.code, f"prepare on {topic}")
        return Transaction(self, conn, topic, partition, frame.payload.tx_id)

    # ------------------------------------------------------------------ consume

    async def fetch(
        self, topic: str, *, count: int = 0, ack_timeout: int = 0, long_poll_ms: int = 0
    ) -> list[ReceivedMessage]:
        """One FETCH_TOPIC_MESSAGE round over the topic's leaders (long-polling the last one
        asked); follows the metadata on 187. Messages come from one partition."""
        for attempt in range(MAX_ATTEMPTS):
            meta = await self.metadata(topic, refresh=attempt > 0)
            leaders = meta.leaders()
            if not leaders:
                return []
            start = self._rotation[topic] % len(leaders)
            self._rotation[topic] += 1
            order = leaders[start:] + leaders[:start]
            stale = False
            for i, broker_id in enumerate(order):
                address = self._address(meta, broker_id)
                poll = long_poll_ms if i == len(order) - 1 else 0
                with self._leader_link(topic):
                    conn = await self._register(address, "consumer", topic)
                    frame = await conn.request(
                        FetchTopicMessageRequest(
                            topics=(TopicFetch(topic=topic, count=count),),
                            app=self.app,
                            ack_timeout=ack_timeout,
                            long_poll_timeout=poll,
                        ),
                        time_limit=self.timeout + poll / 1000,
                    )
                entry = frame.payload.topics[0]
                if entry.code in LEADER_CODES:
                    stale = True
                    continue
                if entry.code != Code.SUCCESS:
                    raise Jmq4Error(entry.code, f"fetch from {topic}")
                if entry.messages:
                    out = [m for msg in entry.messages for m in expand(topic, msg)]
                    for m in out:
                        self._fetched_from[(topic, m.partition)] = address
                    return out
            if not stale:
                return []
        return []

    async def ack(
        self, messages: Sequence[ReceivedMessage], retry_type: RetryType = RetryType.NONE
    ) -> dict[int, int]:
        """COMMIT_ACK the messages with one retry type; the code per partition."""
        return await self.settle([(m, retry_type) for m in messages])

    async def settle(self, outcomes: Sequence[tuple[ReceivedMessage, RetryType]]) -> dict[int, int]:
        """COMMIT_ACK each message with its own retry type, on the connection that fetched it.

        Indexes are sent as contiguous runs (one partition entry per run), so a batch with
        gaps is still acknowledged. Returns the worst code per partition.
        """
        by_partition: dict[tuple[str, int], dict[int, RetryType]] = defaultdict(dict)
        for m, retry_type in outcomes:
            by_partition[(m.topic, m.partition)][m.index] = retry_type
        codes: dict[int, int] = {}
        for (topic, partition), types in by_partition.items():
            runs: list[list[AckEntry]] = []
            for index in sorted(types):
                entry = AckEntry(partition=partition, index=index, retry_type=types[index])
                if runs and runs[-1][-1].index == index - 1:
                    runs[-1].append(entry)
                else:
                    runs.append([entry])
            address = self._fetched_from.get((topic, partition), self.bootstrap)
            conn = await self.connection(address)
            parts = tuple(AckPartition(partition=partition, acks=tuple(run)) for run in runs)
            frame = await conn.request(
                CommitAckRequest(topics=(AckTopic(topic=topic, partitions=parts),), app=self.app),
                time_limit=self.timeout,
            )
            for entry in frame.payload.topics:
                for part in entry.partitions:
                    codes[part.partition] = max(codes.get(part.partition, 0), int(part.code))
        return codes

    async def fetch_index(
        self, topic: str, partitions: Sequence[int]
    ) -> dict[int, tuple[int, int, int]]:
        """Partition → (ack index, min index, max index), asked of the bootstrap broker."""
        conn = await self.connection(self.bootstrap)
        frame = await conn.request(
            FetchIndexRequest(
                topics=(IndexTopic(topic=topic, partitions=tuple(partitions)),), app=self.app
            ),
            time_limit=self.timeout,
        )
        return {
            p.partition: (p.index, p.left_index, p.right_index)
            for p in frame.payload.topics[0].partitions
        }

    async def messages(
        self, topic: str, *, count: int = 0, long_poll_ms: int = 5_000
    ) -> AsyncIterator[ReceivedMessage]:
        """Every message of ``topic``, acked once the loop body took it."""
        while True:
            batch = await self.fetch(topic, count=count, long_poll_ms=long_poll_ms)
            for message in batch:
                yield message
            if batch:
                await self.ack(batch)

    async def consume(
        self,
        topic: str,
        handler: Callable[[ReceivedMessage], Awaitable[None]],
        *,
        stop: asyncio.Event | None = None,
        count: int = 0,
        long_poll_ms: int = 1_000,
    ) -> int:
        """Fetch, process and ack until ``stop`` is set. A message whose handler raises is
        acked with retry type EXCEPTION (it comes back from the retry store). Returns the
        number of messages handled successfully."""
        stop = stop or asyncio.Event()
        handled = 0
        while not stop.is_set():
            batch = await self.fetch(topic, count=count, long_poll_ms=long_poll_ms)
            outcomes: list[tuple[ReceivedMessage, RetryType]] = []
            for message in batch:
                try:
                    await handler(message)
                except Exception:
                    outcomes.append((message, RetryType.EXCEPTION))
                else:
                    outcomes.append((message, RetryType.NONE))
                    handled += 1
            if outcomes:
                await self.settle(outcomes)
        return handled


class Transaction:
    """An open producer transaction (from :meth:`Jmq4Client.transaction`)."""

    def __init__(
        self, client: Jmq4Client, conn: Jmq4Connection, topic: str, partition: int, tx_id: str
    ) -> None:
        self._client = client
        self._conn = conn
        self.topic = topic
        self.partition = partition
        self.tx_id = tx_id

    async def produce(self, messages: Sequence[bytes | OutgoingMessage]) -> None:
        """Log messages in the transaction (invisible until commit)."""
        await self._client.produce(self.topic, messages, partition=self.partition, tx_id=self.tx_id)

    async def commit(self) -> None:
        """Append the logged messages."""
        await self._end(CommitRequest(topic=self.topic, app=self._client.app, tx_id=self.tx_id))

    async def rollback(self) -> None:
        """Discard the logged messages."""
        await self._end(RollbackRequest(topic=self.topic, app=self._client.app, tx_id=self.tx_id))

    async def _end(self, payload: CommitRequest | RollbackRequest) -> None:
        frame = await self._conn.request(payload, time_limit=self._client.timeout)
        if frame.payload.code != Code.SUCCESS:
            raise Jmq4Error(frame.payload.code, f"transaction {self.tx_id}")
