"""A zbus 5 load generator written from the protocol text alone (``../shared/protocols/
zbus.md`` §1 framing, §8 produce, §9.1 queue consume, §10 request/reply, §11.2
``create_mq``): it shares no code with the project's zbus codec, server or client, so the
original zbus 5.1 server and ours are loaded by exactly the same bytes.

Every load keeps its connections busy from one asyncio process and measures in the
generator: a produce counts when its ``200`` ack arrives, a consume when its delivery
arrives, a call when its reply arrives. Each result also carries the generator's own CPU
share over the phase (process time / wall time): near 100% means the generator, not the
server, set the pace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field

BODY = b"x" * 100
CONTENT_LENGTH = b"\r\ncontent-length:"


def frame(headers: dict[str, str], body: bytes = b"") -> bytes:
    """One request-shaped message (§1): ``GET / HTTP/1.1``, headers, content-length, body."""
    head = "GET / HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"{head}content-length: {len(body)}\r\n\r\n".encode() + body


class Msg:
    """One received message: its status (0 when request-shaped) and header block."""

    __slots__ = ("body", "head", "lower", "status")

    def __init__(self, status: int, head: bytes, lower: bytes, body: bytes) -> None:
        self.status, self.head, self.lower, self.body = status, head, lower, body

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (lower-case), trimmed; None when absent."""
        key = b"\r\n" + name.encode() + b":"
        i = self.lower.find(key)
        if i < 0:
            return None
        start = i + len(key)
        end = self.head.find(b"\r\n", start)
        return self.head[start : end if end >= 0 else None].strip().decode()


class Splitter:
    """Splits a byte stream into messages (§1: header block up to the first blank line,
    then ``content-length`` bytes of body)."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[Msg]:
        buf = self.buf + data if self.buf else data
        out: list[Msg] = []
        pos, size = 0, len(buf)
        while True:
            end = buf.find(b"\r\n\r\n", pos)
            if end < 0:
                break
            head = buf[pos:end]
            lower = head.lower()
            i = lower.find(CONTENT_LENGTH)
            length = 0
            if i >= 0:
                j = lower.find(b"\r\n", i + 17)
                length = int(lower[i + 17 : j if j >= 0 else None])
            stop = end + 4 + length
            if stop > size:
                break
            status = int(lower[9:12]) if lower.startswith(b"http") else 0
            out.append(Msg(status, head, lower, buf[end + 4 : stop]))
            pos = stop
        self.buf = buf[pos:]
        return out


class Conn(asyncio.Protocol):
    """One zbus connection: write bytes, read whole messages.

    A plain :class:`asyncio.Protocol` rather than streams: a read is one future, and a
    timed read one timer, where ``asyncio.wait_for`` over ``StreamReader.read`` cost a
    task per read. The generator shares the machine with the server it measures, so
    every microsecond it spends per message is taken from that server."""

    def __init__(self) -> None:
        self.splitter = Splitter()
        self.transport: asyncio.Transport | None = None
        self.ready: list[Msg] = []
        self.waiter: asyncio.Future[None] | None = None
        self.closed: BaseException | None = None

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(cls, host, port)
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        msgs = self.splitter.feed(data)
        if msgs:
            self.ready.extend(msgs)
            self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = ConnectionError("connection closed by the server")
        self._wake()

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self, wait: float | None = None) -> list[Msg]:
        """The messages received since the last read (at least one); ``TimeoutError``
        when none came within ``wait`` seconds."""
        if not self.ready:
            if self.closed is not None:
                raise self.closed
            loop = asyncio.get_running_loop()
            self.waiter = waiter = loop.create_future()
            timer = None if wait is None else loop.call_later(wait, _time_out, waiter)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
            if not self.ready:
                raise self.closed or ConnectionError("connection closed by the server")
        msgs, self.ready = self.ready, []
        return msgs

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


@dataclass
class Result:
    """What one load measured."""

    rate: float = 0.0
    count: int = 0
    seconds: float = 0.0
    errors: int = 0
    """Replies with a status other than 200."""
    lost: int = 0
    """RPC calls whose reply never came (within the wait)."""
    waiting: float = 0.0
    """RPC: the share of the callers' time spent waiting out replies that never came
    (1.0: every caller waited the whole phase)."""
    cpu: float = 0.0
    """The generator's CPU share over the phase (1.0 = one core busy)."""
    per_mq: list[int] = field(default_factory=list)
    note: str = ""


class _Clock:
    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def finish(self, result: Result, count: int) -> Result:
        wall = time.perf_counter() - self.wall
        result.count, result.seconds = count, wall
        result.rate = count / wall if wall > 0 else 0.0
        result.cpu = (time.process_time() - self.cpu) / wall if wall > 0 else 0.0
        return result


async def create_mqs(port: int, names: list[str], mode: int = 1) -> None:
    """``create_mq`` (§11.2) for each name: 200 when created or already there."""
    conn = await Conn.open(port)
    try:
        for n, name in enumerate(names):
            body = json.dumps({"mqName": name, "accessToken": "", "mqMode": mode}).encode()
            conn.write(frame({"cmd": "admin", "sub_cmd": "create_mq", "msgid": f"a{n}"}, body))
            [reply] = await conn.read(10)
            if reply.status != 200:
                raise RuntimeError(f"create_mq {name}: {reply.status} {reply.body[:200]!r}")
    finally:
        conn.close()


async def produce(
    port: int,
    mqs: list[str],
    *,
    seconds: float | None = None,
    per_mq: int | None = None,
    in_flight: int = 128,
) -> Result:
    """One connection per MQ, each keeping ``in_flight`` produces (ack on, 100-byte body)
    outstanding: for ``seconds``, or until ``per_mq`` were acked on each."""
    result = Result(per_mq=[0] * len(mqs))
    stop = time.perf_counter() + seconds if seconds is not None else float("inf")
    limit = per_mq if per_mq is not None else 1 << 62

    async def worker(i: int) -> int:
        conn = await Conn.open(port)
        one = frame({"cmd": "produce", "mq": mqs[i], "msgid": f"p{i}"}, BODY)
        sent = min(in_flight, limit)
        acked = 0
        conn.write(one * sent)
        try:
            while acked < sent:
                replies = await conn.read(30)
                ok = sum(1 for m in replies if m.status == 200)
                result.errors += len(replies) - ok
                acked += len(replies)
                result.per_mq[i] += ok
                if time.perf_counter() < stop:
                    more = min(len(replies), limit - sent)
                    if more > 0:
                        conn.write(one * more)
                        sent += more
        finally:
            conn.close()
        return result.per_mq[i]

    clock = _Clock()
    counts = await asyncio.gather(*(worker(i) for i in range(len(mqs))))
    return clock.finish(result, sum(counts))


async def stream_consume(port: int, mqs: list[str], totals: list[int], stall: float = 10) -> Result:
    """One connection per MQ with one ``window: -1`` consume (§9.1: every message streamed
    under its msgid) until it received ``totals[i]`` messages."""
    result = Result(per_mq=[0] * len(mqs))

    async def worker(i: int) -> int:
        conn = await Conn.open(port)
        conn.write(frame({"cmd": "consume", "mq": mqs[i], "msgid": f"s{i}", "window": "-1"}))
        got = 0
        try:
            while got < totals[i]:
                try:
                    msgs = await conn.read(stall)
                except TimeoutError:
                    result.note += f" {mqs[i]} stalled at {got}/{totals[i]};"
                    break
                ok = sum(1 for m in msgs if m.status == 200)
                result.errors += len(msgs) - ok
                got += ok
        finally:
            conn.close()
        result.per_mq[i] = got
        return got

    clock = _Clock()
    counts = await asyncio.gather(*(worker(i) for i in range(len(mqs))))
    return clock.finish(result, sum(counts))


async def long_poll(
    port: int, mqs: list[str], totals: list[int], seconds: float, stall: float = 10
) -> Result:
    """One connection per MQ consuming with ``window: 1`` (§9.1, the zbus 5 clients'
    default): one consume, wait for its one delivery, consume again — for ``seconds``, or
    until ``totals[i]`` messages came."""
    result = Result(per_mq=[0] * len(mqs))
    stop = time.perf_counter() + seconds

    async def worker(i: int) -> int:
        conn = await Conn.open(port)
        one = frame({"cmd": "consume", "mq": mqs[i], "msgid": f"l{i}", "window": "1"})
        got = 0
        try:
            while got < totals[i] and time.perf_counter() < stop:
                conn.write(one)
                try:
                    msgs = await conn.read(stall)
                except TimeoutError:
                    result.note += f" {mqs[i]} stalled at {got};"
                    break
                for m in msgs:
                    if m.status == 200:
                        got += 1
                    else:
                        result.errors += 1
        finally:
            conn.close()
        result.per_mq[i] = got
        return got

    clock = _Clock()
    counts = await asyncio.gather(*(worker(i) for i in range(len(mqs))))
    return clock.finish(result, sum(counts))


async def rpc(
    port: int,
    service: str,
    seconds: float,
    *,
    callers: int = 8,
    workers: int = 4,
    reply_wait: float = 1.0,
) -> Result:
    """Request/reply (§10): ``workers`` connections stream the service MQ (``window: -1``)
    and answer each request with ``produce`` to its ``mq_reply`` (``msgid`` = the
    request's ``msgid_raw``, ``ack: 0``); ``callers`` connections each make one call at a
    time (the zbus 5 reply queue has one pull slot per connection, §13.2) for ``seconds``.
    A call whose reply has not come within ``reply_wait`` counts as lost (the caller moves
    on); a reply that comes later is not counted as a call."""
    result = Result()
    ready = asyncio.Event()
    started = 0

    async def serve() -> None:
        nonlocal started
        conn = await Conn.open(port)
        conn.write(frame({"cmd": "consume", "mq": service, "msgid": "w", "window": "-1"}))
        started += 1
        if started == workers:
            ready.set()
        try:
            while True:
                out = []
                for call in await conn.read():
                    if call.status not in (0, 200):
                        result.errors += 1
                        continue
                    headers = {
                        "cmd": "produce",
                        "mq": call.header("mq_reply") or "",
                        "msgid": call.header("msgid_raw") or "",
                        "ack": "0",
                    }
                    out.append(frame(headers, call.body))
                conn.write(b"".join(out))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            conn.close()

    async def call(c: int, stop: float) -> int:
        conn = await Conn.open(port)
        done = n = 0
        try:
            while time.perf_counter() < stop:
                n += 1
                msgid = f"r{c}-{n}"
                conn.write(frame({"cmd": "request", "mq": service, "msgid": msgid}, BODY))
                deadline = time.perf_counter() + reply_wait
                answered = False
                while not answered:
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    try:
                        msgs = await conn.read(left)
                    except TimeoutError:
                        break
                    for m in msgs:
                        if m.header("msgid") == msgid:
                            answered = True
                            if m.status >= 300:  # 0: a reply passed on request-shaped
                                result.errors += 1
                if answered:
                    done += 1
                else:
                    result.lost += 1
        finally:
            conn.close()
        return done

    servers = [asyncio.create_task(serve()) for _ in range(workers)]
    await asyncio.wait_for(ready.wait(), 10)
    await asyncio.sleep(0.3)  # the workers' consumes are registered
    clock = _Clock()
    stop = time.perf_counter() + seconds
    counts = await asyncio.gather(*(call(c, stop) for c in range(callers)))
    finished = clock.finish(result, sum(counts))
    if finished.seconds > 0:
        finished.waiting = min(1.0, result.lost * reply_wait / (callers * finished.seconds))
    for task in servers:
        task.cancel()
    await asyncio.gather(*servers, return_exceptions=True)
    return finished


@dataclass
class Paced:
    """What :func:`paced_stream` measured."""

    sent: int = 0
    delivered: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    """Produce → delivery of each message, in ms."""


async def paced_stream(
    port: int,
    mq: str,
    seconds: float,
    *,
    producers: int = 8,
    rate: float = 10.0,
    consumers: int = 8,
    drain: float = 2.0,
) -> Paced:
    """``consumers`` connections stream ``mq`` (``window: -1``); ``producers`` connections
    each produce one message (``ack: 0``, 100-byte body carrying its send time) every
    ``1 / rate`` seconds for ``seconds``; then up to ``drain`` seconds for the last ones."""
    out = Paced()
    conns = [await Conn.open(port) for _ in range(consumers)]
    for i, conn in enumerate(conns):
        conn.write(frame({"cmd": "consume", "mq": mq, "msgid": f"s{i}", "window": "-1"}))

    target = float("inf")  # every message sent: set once the producers are done
    done = asyncio.Event()

    async def consume(conn: Conn) -> None:
        while True:
            for m in await conn.read():
                if m.status == 200:
                    now = time.perf_counter_ns()
                    out.delivered += 1
                    out.latencies_ms.append((now - int(m.body[:20])) / 1e6)
            if out.delivered >= target:
                done.set()

    readers = [asyncio.create_task(consume(c)) for c in conns]
    await asyncio.sleep(0.5)  # every consume parked

    async def produce(i: int) -> None:
        conn = await Conn.open(port)
        stop = time.perf_counter() + seconds
        try:
            while time.perf_counter() < stop:
                body = b"%020d" % time.perf_counter_ns() + BODY[20:]
                conn.write(frame({"cmd": "produce", "mq": mq, "msgid": f"p{i}", "ack": "0"}, body))
                out.sent += 1
                await asyncio.sleep(1 / rate)
        finally:
            conn.close()

    await asyncio.gather(*(produce(i) for i in range(producers)))
    target = out.sent
    if out.delivered < target:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), drain)
    for task in readers:
        task.cancel()
    for conn in conns:
        conn.close()
    return out
