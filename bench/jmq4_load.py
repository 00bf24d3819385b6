"""A JMQ4 consumer load generator written from the protocol text alone
(``../shared/protocols/jmq4.md`` §2 framing, §3 message layout, §5.2 ADD_CONNECTION,
ADD_CONSUMER and ADD_PRODUCER, §5.5 FETCH_TOPIC_MESSAGE and COMMIT_ACK, §5.6
PRODUCE_MESSAGE): it shares no code with the project's JMQ4 codec, server or client.

A consumer keeps several fetch loops busy, as JMQ4 consumers do (a fetch locks one
partition, so one loop per partition). A loop fetches, walks the response's messages field
by field as §3 lays them out (every length checked against the frame), and acks each
partition's indexes in one COMMIT_ACK. It reads only what acking needs: a Java client's
decoder costs a fraction of the Python codec's, and the benchmark measures the broker, not
the load generator. Each result carries the generator's CPU share (process time / wall
time): near 100% means the generator, not the broker, set the pace.

:func:`latency` times publish → delivery: a producer sends a few messages every tick,
each carrying its send time as its body, and long-polling fetch loops (one per partition)
note when each arrives.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import struct
import time
import zlib
from dataclasses import dataclass

MAGIC = 0xCAFEBEBE
VERSION = 4
RECEIVE = 0x02  # identity: request, QoS RECEIVE
ADD_CONNECTION, ADD_CONSUMER, ADD_PRODUCER = 1, 3, 5
FETCH_TOPIC_MESSAGE, COMMIT_ACK, PRODUCE_MESSAGE = 30, 32, 50
QOS_RECEIVE = 1  # PRODUCE_MESSAGE's full qosLevel (§5.6)
PLAIN_JAVA_SYSCODE = 0x018C  # §3.1: version 1, source JOYQUEUE, short address
PYTHON = 3  # ADD_CONNECTION language

_HEAD = struct.Struct(">iIbBibq")  # length, magic, version, identity, requestId, type, sendTime
_RESPONSE = struct.Struct(">iIbBibqBh")  # … status (unsigned), error length
_MESSAGE = struct.Struct(">ihq")  # size, partition, index
_FIXED = 61  # bytes before the body (§3)
_I4, _I2, _I1 = struct.Struct(">i"), struct.Struct(">h"), struct.Struct(">b")
_ACK = struct.Struct(">hqb")  # partition, index, retryType
_PARTITION_CODE = struct.Struct(">hi")
_MESSAGE_HEAD = struct.Struct(">ihqiHHb16sqiqh")  # §3: size … flag, before the body
_PRODUCED = struct.Struct(">hqq")  # partition, index, startTime


class ProtocolError(Exception):
    """The broker answered something the spec does not allow here."""


def s1(text: str) -> bytes:
    raw = text.encode()
    return bytes((len(raw),)) + raw


def s2(text: str) -> bytes:
    raw = text.encode()
    return _I2.pack(len(raw)) + raw


def frame(request_id: int, type_: int, payload: bytes) -> bytes:
    """A request frame (§2): the 23-byte header, then the payload."""
    head = _HEAD.pack(
        _HEAD.size + len(payload), MAGIC, VERSION, RECEIVE, request_id, type_,
        time.time_ns() // 1_000_000,
    )  # fmt: skip
    return head + payload


def add_connection(app: str, token: str) -> bytes:
    """ADD_CONNECTION (§5.2): username, password, app, token, region, namespace S1,
    language BYTE, version, ip S1, time LONG, sequence LONG."""
    return (
        s1("") + s1("") + s1(app) + s1(token) + s1("") + s1("") + bytes((PYTHON,))
        + s1("jmq4-load") + s1("127.0.0.1") + struct.pack(">qq", time.time_ns() // 10**6, 0)
    )  # fmt: skip


def add_consumer(topic: str, app: str) -> bytes:
    """ADD_CONSUMER (§5.3): ``A{topic S2}, app S2, sequence LONG``."""
    return _I2.pack(1) + s2(topic) + s2(app) + struct.pack(">q", 0)


def fetch_topic(topic: str, app: str, count: int, long_poll_ms: int = 0) -> bytes:
    """FETCH_TOPIC_MESSAGE (§5.5): ``A{topic S2, count SHORT}, app S2, ackTimeout INT,
    longPollTimeout INT`` (ackTimeout 0: the policy's; longPollTimeout 0: no long poll)."""
    return (
        _I2.pack(1) + s2(topic) + _I2.pack(count) + s2(app)
        + struct.pack(">ii", 0, long_poll_ms)
    )  # fmt: skip


def broker_message(
    body: bytes, *, app: str, send_time: int, partition: int = -1, business_id: str = "",
    attributes: str = "", client_ip: bytes = b"", sys_code: int = PLAIN_JAVA_SYSCODE,
) -> bytes:  # fmt: skip
    """One message as a producer sends it (§3): index, term and storeTime 0, bodyCRC the
    CRC-32 of the body, ``attributes`` the properties text (§3.3), no extension."""
    rest = _I4.pack(len(body)) + body + s1(business_id) + s2(attributes) + _I4.pack(0) + s1(app)
    size = _MESSAGE_HEAD.size + len(rest)
    head = _MESSAGE_HEAD.pack(
        size, partition, 0, 0, 0x1234, sys_code, 0, client_ip.ljust(16, b"\0"), send_time, 0,
        zlib.crc32(body), 0,
    )  # fmt: skip
    return head + rest


def produce_message(
    topic: str, app: str, messages: list[bytes], *, qos: int = QOS_RECEIVE, timeout_ms: int = 5000
) -> bytes:
    """PRODUCE_MESSAGE (§5.6): ``A{topic S2, txId S2, timeout INT, qosLevel BYTE, A{MSG}},
    app S2`` — one topic, no transaction."""
    return (
        _I2.pack(1) + s2(topic) + s2("") + _I4.pack(timeout_ms) + bytes((qos,))
        + _I2.pack(len(messages)) + b"".join(messages) + s2(app)
    )  # fmt: skip


def produced_code(payload: bytes) -> int:
    """The topic code of a PRODUCE_MESSAGE response (§5.6: ``A{topic S2, code INT,
    A{partition SHORT, index LONG, startTime LONG}}``), its layout checked."""
    (topics,) = _I2.unpack_from(payload, 0)
    (n,) = _I2.unpack_from(payload, 2)
    pos = 4 + n
    (code,) = _I4.unpack_from(payload, pos)
    (items,) = _I2.unpack_from(payload, pos + 4)
    if topics != 1 or pos + 6 + items * _PRODUCED.size != len(payload):
        raise ProtocolError(f"PRODUCE_MESSAGE response {payload!r}")
    return code


def commit_ack(topic: str, app: str, by_partition: dict[int, list[int]]) -> bytes:
    """COMMIT_ACK (§5.5): ``A{topic S2, A{partition SHORT, A{partition SHORT, index LONG,
    retryType BYTE}}}, app S2``; every index acked as consumed (retryType 0)."""
    parts = [_I2.pack(1), s2(topic), _I2.pack(len(by_partition))]
    for partition, indexes in by_partition.items():
        parts.append(_I2.pack(partition) + _I2.pack(len(indexes)))
        parts.extend(_ACK.pack(partition, index, 0) for index in indexes)
    parts.append(s2(app))
    return b"".join(parts)


def fetched_indexes(
    payload: bytes, bodies: list[bytes] | None = None
) -> tuple[int, dict[int, list[int]]]:
    """The FETCH_TOPIC_MESSAGE response's code and its messages' indexes by partition,
    walking each message (§3) by its fields, not by its ``size``; each message's body is
    appended to ``bodies`` when given."""
    view, end = memoryview(payload), len(payload)
    (topics,) = _I2.unpack_from(view, 0)
    if topics != 1:
        raise ProtocolError(f"{topics} topic entries for a one-topic fetch")
    (n,) = _I2.unpack_from(view, 2)
    pos = 4 + n
    (count,) = _I2.unpack_from(view, pos)
    pos += 2
    out: dict[int, list[int]] = {}
    for _ in range(count):
        start = pos
        size, partition, index = _MESSAGE.unpack_from(view, pos)
        pos += _FIXED
        (n,) = _I4.unpack_from(view, pos)  # body
        if bodies is not None:
            bodies.append(payload[pos + 4 : pos + 4 + n])
        pos += 4 + n
        pos += 1 + _I1.unpack_from(view, pos)[0]  # businessId S1
        pos += 2 + _I2.unpack_from(view, pos)[0]  # attributes S2
        (n,) = _I4.unpack_from(view, pos)  # extension
        pos += 4 + n
        pos += 1 + _I1.unpack_from(view, pos)[0]  # app S1
        if pos > end or pos - start != size:
            raise ProtocolError(f"message at {start}: size {size}, fields take {pos - start}")
        indexes = out.get(partition)
        if indexes is None:
            out[partition] = [index]
        else:
            indexes.append(index)
    (code,) = _I4.unpack_from(view, pos)
    if pos + 4 != end:
        raise ProtocolError(f"{end - pos - 4} bytes after the fetch response")
    return code, out


def ack_codes(payload: bytes) -> None:
    """Check a COMMIT_ACK response (§5.5: ``A{topic S2, A{partition SHORT, code INT}}``):
    one topic entry, every partition's code 0."""
    (topics,) = _I2.unpack_from(payload, 0)
    (n,) = _I2.unpack_from(payload, 2)
    pos = 4 + n
    (partitions,) = _I2.unpack_from(payload, pos)
    pos += 2
    codes = [_PARTITION_CODE.unpack_from(payload, pos + 6 * i) for i in range(partitions)]
    if topics != 1 or pos + 6 * partitions != len(payload) or any(c for _, c in codes):
        raise ProtocolError(f"COMMIT_ACK response {payload!r}")


class Connection:
    """One JMQ4 connection with any number of requests in flight (matched by requestId)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self.task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, port: int, app: str, token: str) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = cls(reader, writer)
        await conn.request(ADD_CONNECTION, add_connection(app, token))
        return conn

    async def _read(self) -> None:
        try:
            while True:
                head = await self.reader.readexactly(4)
                (length,) = _I4.unpack(head)
                data = head + await self.reader.readexactly(length - 4)
                _, magic, _, _, request_id, _, _, status, n = _RESPONSE.unpack_from(data)
                if magic != MAGIC:
                    raise ProtocolError(f"bad magic {magic:#x}")
                fut = self.pending.pop(request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result((status, data[_RESPONSE.size + n :]))
        except (asyncio.IncompleteReadError, ConnectionError, ProtocolError) as exc:
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"connection lost: {exc}"))

    async def request(self, type_: int, payload: bytes) -> bytes:
        """Send one request; its response payload (a non-zero status raises)."""
        request_id = next(self.ids)
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = fut
        self.writer.write(frame(request_id, type_, payload))
        status, payload = await fut
        if status:
            raise ProtocolError(f"type {type_}: status {status}")
        return payload

    async def close(self) -> None:
        self.task.cancel()
        self.writer.close()
        await asyncio.gather(self.task, return_exceptions=True)


@dataclass
class ConsumeResult:
    """Messages consumed and acked, their rate, and the generator's CPU share."""

    messages: int
    rate: float
    generator_cpu: float


async def consume(
    port: int, *, topic: str, app: str, token: str, total: int, connections: int = 2,
    loops: int = 8, count: int = 256,
) -> ConsumeResult:  # fmt: skip
    """Fetch and ack ``total`` messages of ``topic`` with ``loops`` fetch loops spread over
    ``connections`` connections; stops early when every loop finds the topic empty."""
    conns = [await Connection.open(port, app, token) for _ in range(connections)]
    for conn in conns:
        await conn.request(ADD_CONSUMER, add_consumer(topic, app))
    fetch = fetch_topic(topic, app, count)
    got = 0

    async def loop(conn: Connection) -> None:
        nonlocal got
        while got < total:
            code, by_partition = fetched_indexes(await conn.request(FETCH_TOPIC_MESSAGE, fetch))
            if code:
                raise ProtocolError(f"fetch code {code}")
            if not by_partition:
                return
            ack_codes(await conn.request(COMMIT_ACK, commit_ack(topic, app, by_partition)))
            got += sum(map(len, by_partition.values()))

    cpu, start = time.process_time(), time.perf_counter()
    await asyncio.gather(*(loop(conns[i % connections]) for i in range(loops)))
    elapsed = time.perf_counter() - start
    share = (time.process_time() - cpu) / elapsed
    for conn in conns:
        await conn.close()
    return ConsumeResult(got, got / elapsed, share)


@dataclass
class LatencyResult:
    """Publish → delivery in ms over the counted messages, and the generator's CPU share."""

    p50_ms: float
    p99_ms: float
    samples: int
    produced: int
    generator_cpu: float


async def latency(
    port: int, *, topic: str, app: str, token: str, partitions: int, rate: int = 5000,
    seconds: float = 5.0, warmup: float = 1.0, per_tick: int = 10,
) -> LatencyResult:  # fmt: skip
    """Produce ``rate`` messages a second — ``per_tick`` in one PRODUCE_MESSAGE every
    ``per_tick / rate`` seconds, partitions in turn, each body its send time in ms — for
    ``warmup`` + ``seconds``; one long-polling fetch loop per partition acks what it gets
    and notes each message's age on arrival (those sent in the warm-up are not counted:
    new connections and first script loads are not the steady state)."""
    producer = await Connection.open(port, app, token)
    await producer.request(ADD_PRODUCER, add_consumer(topic, app))  # the same layout (§5.2)
    consumer = await Connection.open(port, app, token)
    await consumer.request(ADD_CONSUMER, add_consumer(topic, app))
    fetch = fetch_topic(topic, app, 256, long_poll_ms=200)
    samples: list[float] = []
    counted_from = (time.time() + warmup) * 1000
    producing = True

    async def fetch_loop() -> None:
        while producing:
            bodies: list[bytes] = []
            code, by_partition = fetched_indexes(
                await consumer.request(FETCH_TOPIC_MESSAGE, fetch), bodies
            )
            now = time.time() * 1000
            if code:
                raise ProtocolError(f"fetch code {code}")
            for body in bodies:
                sent = float(body)
                if sent >= counted_from:
                    samples.append(now - sent)
            if by_partition:
                ack_codes(await consumer.request(COMMIT_ACK, commit_ack(topic, app, by_partition)))

    async def send(payload: bytes) -> None:
        code = produced_code(await producer.request(PRODUCE_MESSAGE, payload))
        if code:
            raise ProtocolError(f"produce code {code}")

    loops = [asyncio.create_task(fetch_loop()) for _ in range(partitions)]
    sends: set[asyncio.Task[None]] = set()
    failed: list[BaseException] = []

    def sent(task: asyncio.Task[None]) -> None:
        sends.discard(task)
        if not task.cancelled() and task.exception() is not None:
            failed.append(task.exception())  # type: ignore[arg-type]

    interval = per_tick / rate
    cpu, start = time.process_time(), time.perf_counter()
    tick = 0
    while time.perf_counter() - start < warmup + seconds and not failed:
        now_ms = time.time() * 1000
        body = f"{now_ms:.3f}".encode()
        message = broker_message(body, app=app, send_time=int(now_ms), partition=tick % partitions)
        task = asyncio.create_task(send(produce_message(topic, app, [message] * per_tick)))
        sends.add(task)
        task.add_done_callback(sent)
        tick += 1
        delay = start + tick * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    await asyncio.gather(*sends, return_exceptions=True)
    await asyncio.sleep(0.5)  # the last messages arrive
    share = (time.process_time() - cpu) / (time.perf_counter() - start)
    producing = False
    results = await asyncio.gather(*loops, return_exceptions=True)  # each within a long poll
    await producer.close()
    await consumer.close()
    errors = failed + [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]
    if len(samples) < 2:
        raise ProtocolError(f"{len(samples)} messages timed")
    q = statistics.quantiles(samples, n=100)
    return LatencyResult(q[49], q[98], len(samples), tick * per_tick, share)
