"""A VibeMQ load generator written from the protocol text alone
(``../shared/protocols/vibemq.md`` §1 framing, §5 connect, §6 publish, §7 subscribe, deliver
and ack): it shares no code with the project's VibeMQ codec, server or client.

Each connection is an asyncio protocol that answers what it reads in the same turn: a
publisher sends its next publish for every ``publishAck`` (keeping ``window`` in flight),
a subscriber acks every ``deliver`` of a read in one write (the documented form,
``headers.messageId``). Frames are built from byte templates and read with a typed decoder
that takes only ``id``, ``type`` and ``headers``, as a lean client in any language would:
the benchmark measures the broker, not the load generator. Each result carries the
generator's CPU share (process time / wall time): near 100% means the generator, not the
broker, set the pace.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from dataclasses import dataclass

import msgspec

PAYLOAD = b'{"data":"' + b"x" * 88 + b'"}'  # about 100 bytes of JSON


class Reply(msgspec.Struct):
    """The fields of a server frame the generator reads (others are skipped)."""

    type: str = ""
    id: str = ""
    headers: dict[str, str] | None = None
    errorCode: str = ""  # the wire name


_decode = msgspec.json.Decoder(Reply).decode
_encode = msgspec.json.encode


def frame(obj: dict) -> bytes:
    """§1: a big-endian uint32 length, then the UTF-8 JSON object."""
    body = _encode(obj)
    return len(body).to_bytes(4, "big") + body


class LoadError(Exception):
    """The broker answered what the spec does not allow here."""


class Peer(asyncio.Protocol):
    """One connection: splits frames (§1) and hands each decoded one to :meth:`on_frames`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.reply: asyncio.Future[Reply] | None = None
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def close(self) -> None:
        """Close the connection; losing it is no failure now."""
        if not self.failed.done():
            self.failed.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.failed.done():
            self.failed.set_exception(LoadError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        frames, pos, size = [], 0, len(buf)
        while size - pos >= 4:
            n = int.from_bytes(buf[pos : pos + 4], "big")
            if size - pos - 4 < n:
                break
            frames.append(_decode(buf[pos + 4 : pos + 4 + n]))
            pos += 4 + n
        self.buf = buf[pos:]
        try:
            self.on_frames(frames)
        except LoadError as exc:
            if not self.failed.done():
                self.failed.set_exception(exc)

    def on_frames(self, frames: list[Reply]) -> None:
        for reply in frames:
            if self.reply is not None and not self.reply.done():
                self.reply.set_result(reply)

    async def request(self, obj: dict, expect: str) -> Reply:
        """Send one command and wait for its reply of type ``expect``."""
        self.reply = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(frame(obj))
        reply = await asyncio.wait_for(self.reply, 10)
        if reply.type != expect:
            raise LoadError(f"{obj['type']}: {reply.type} {reply.errorCode}")
        return reply


async def open_peer(cls: type[Peer], port: int, token: str) -> Peer:
    """A connected and authenticated (§5) connection."""
    _, peer = await asyncio.get_running_loop().create_connection(cls, "127.0.0.1", port)
    await peer.request(
        {"id": "c1", "type": "connect", "headers": {"authToken": token}}, "connectAck"
    )
    return peer


class Publisher(Peer):
    """Keeps ``window`` publishes in flight, each with its own id (§6)."""

    def start(self, queue: str, tag: str, window: int, stop: float) -> None:
        self._prepare(queue, tag)
        self.stop, self.in_flight = stop, 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_frames = self._acked  # type: ignore[method-assign]
        self._send(window)

    def _prepare(self, queue: str, tag: str) -> None:
        self.head = b'{"id":"' + tag.encode() + b"-"
        self.tail = (
            b'","type":"publish","queue":"' + queue.encode() + b'","payload":' + PAYLOAD + b"}"
        )
        self.ids = itertools.count()
        self.acked = 0

    def _write(self, n: int, stamp: bytes = b"") -> None:
        """``n`` publishes with the next ids (each followed by ``stamp``), in one write."""
        out = []
        for i in itertools.islice(self.ids, n):
            body = self.head + str(i).encode() + stamp + self.tail
            out.append(len(body).to_bytes(4, "big") + body)
        assert self.transport is not None
        self.transport.write(b"".join(out))

    def _send(self, n: int) -> None:
        self.in_flight += n
        self._write(n)

    def _count_acks(self, frames: list[Reply]) -> None:
        for reply in frames:
            if reply.type != "publishAck":
                raise LoadError(f"publish: {reply.type} {reply.errorCode}")
        self.acked += len(frames)

    def _acked(self, frames: list[Reply]) -> None:
        self._count_acks(frames)
        self.in_flight -= len(frames)
        if time.perf_counter() < self.stop:
            self._send(len(frames))
        elif not self.in_flight and not self.done.done():
            self.done.set_result(None)


class Subscriber(Peer):
    """Acks every delivery of a read in one write (§7, ``headers.messageId``)."""

    def start(self, total: int) -> None:
        self.got, self.total = 0, total
        self.ids = itertools.count()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_frames = self._delivered  # type: ignore[method-assign]

    def _delivered(self, frames: list[Reply]) -> None:
        acks = []
        got = 0
        for reply in frames:
            if reply.type != "deliver":
                if reply.type == "subscribeAck" and reply.id == "s1":
                    continue
                raise LoadError(f"subscriber got {reply.type} {reply.errorCode}")
            got += 1
            body = b'{"id":"a%d","type":"ack","headers":{"messageId":%s}}' % (
                next(self.ids),
                _encode(reply.id),
            )
            acks.append(len(body).to_bytes(4, "big") + body)
        assert self.transport is not None
        self.transport.write(b"".join(acks))
        self.got += got
        if self.got >= self.total and not self.done.done():
            self.done.set_result(None)


class Paced(Publisher):
    """Publishes ``n`` messages in one write per :meth:`tick`; each id carries its send
    time (``l-<n>-<perf_counter_ns>``), so the subscriber reads latency off the ``deliver``
    id (§7: the id is the message id) without decoding payloads."""

    def start_paced(self, queue: str) -> None:
        self._prepare(queue, "l")
        self.on_frames = self._count_acks  # type: ignore[method-assign]

    def tick(self, n: int) -> None:
        self._write(n, b"-%d" % time.perf_counter_ns())


class Timing(Subscriber):
    """A :class:`Subscriber` that notes each delivery's latency (ms) from its id's send
    time, for those sent at or after ``counted_from`` (``perf_counter_ns``)."""

    def start(self, total: int) -> None:  # type: ignore[override]
        super().start(total)
        self.samples: list[float] = []
        self.counted_from = 0
        self.on_frames = self._timed  # type: ignore[method-assign]

    def _timed(self, frames: list[Reply]) -> None:
        now = time.perf_counter_ns()
        for reply in frames:
            if reply.type == "subscribeAck" and self.reply is not None and not self.reply.done():
                self.reply.set_result(reply)  # the subscribe's :meth:`request`
            elif reply.type == "deliver":
                sent = int(reply.id.rsplit("-", 1)[1])
                if sent >= self.counted_from:
                    self.samples.append((now - sent) / 1e6)
        self._delivered(frames)


@dataclass
class Latency:
    """Publish→deliver latency quantiles (ms), how many were counted, the generator's CPU."""

    p50: float
    p99: float
    samples: int
    generator_cpu: float


async def latency(
    port: int, token: str, queue: str, rate: int, seconds: float, warmup: float = 1.0
) -> Latency:
    """Publish→deliver latency at ``rate`` msg/s: 10 publishes in one write every
    ``10 / rate`` s on one connection, one subscriber acking every read, for ``warmup``
    seconds (not counted) and then ``seconds``."""
    per_tick = 10
    total = int(rate * (seconds + warmup)) // per_tick * per_tick
    sub = await open_peer(Timing, port, token)
    sub.start(total)  # type: ignore[attr-defined]
    await sub.request({"id": "s1", "type": "subscribe", "queue": queue}, "subscribeAck")
    pub = await open_peer(Paced, port, token)
    pub.start_paced(queue)  # type: ignore[attr-defined]
    cpu, start = time.process_time(), time.perf_counter()
    sub.counted_from = time.perf_counter_ns() + int(warmup * 1e9)  # type: ignore[attr-defined]
    interval = per_tick / rate
    for n in range(total // per_tick):
        delay = start + n * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        pub.tick(per_tick)  # type: ignore[attr-defined]
    await _until(sub.done, [sub, pub], 60)  # type: ignore[attr-defined]
    share = (time.process_time() - cpu) / (time.perf_counter() - start)
    sub.close()
    pub.close()
    cuts = statistics.quantiles(sub.samples, n=100)  # type: ignore[attr-defined]
    return Latency(cuts[49], cuts[98], len(sub.samples), share)  # type: ignore[attr-defined]


@dataclass
class Result:
    """Messages counted, their rate and the generator's CPU share."""

    messages: int
    rate: float
    generator_cpu: float


async def _until(done: asyncio.Future[None], peers: list[Peer], within: float) -> None:
    """Wait for ``done``; a peer's failure (or the timeout) raises."""
    failures = [p.failed for p in peers]
    finished, _ = await asyncio.wait(
        [done, *failures], timeout=within, return_when="FIRST_COMPLETED"
    )
    if not finished:
        raise LoadError(f"nothing finished within {within} s")
    for f in finished:
        f.result()


async def publish(
    port: int, token: str, queue: str, seconds: float, *, conns: int = 4, window: int = 64
) -> Result:
    """Publishes with ``window`` in flight on each of ``conns`` connections for ``seconds``:
    a message counts when its ``publishAck`` (it is stored) arrives."""
    peers = [await open_peer(Publisher, port, token) for _ in range(conns)]
    cpu, start = time.process_time(), time.perf_counter()
    stop = start + seconds
    for i, peer in enumerate(peers):
        peer.start(queue, f"p{i}", window, stop)  # type: ignore[attr-defined]
    for peer in peers:
        await _until(peer.done, peers, seconds + 30)  # type: ignore[attr-defined]
    wall = time.perf_counter() - start
    share = (time.process_time() - cpu) / wall
    for peer in peers:
        peer.close()
    acked = sum(p.acked for p in peers)  # type: ignore[attr-defined]
    return Result(acked, acked / wall, share)


async def deliver(port: int, token: str, queue: str, total: int) -> Result:
    """Delivery to one subscriber acking everything, until ``total`` messages arrived."""
    peer = await open_peer(Subscriber, port, token)
    peer.start(total)  # type: ignore[attr-defined]
    cpu, start = time.process_time(), time.perf_counter()
    assert peer.transport is not None
    peer.transport.write(frame({"id": "s1", "type": "subscribe", "queue": queue}))
    await _until(peer.done, [peer], 120)  # type: ignore[attr-defined]
    wall = time.perf_counter() - start
    share = (time.process_time() - cpu) / wall
    peer.close()
    got = peer.got  # type: ignore[attr-defined]
    return Result(got, got / wall, share)
