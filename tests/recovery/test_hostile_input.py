"""100,000 malformed frames to each protocol port of a real broker process (issue 20 item 7):
it keeps serving valid clients, logs a bounded number of lines, and its memory stays
bounded — also under VibeMQ frames of a megabyte that decode into large object trees."""

from __future__ import annotations

import asyncio
import re
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from brokers.clients.jmq4 import Jmq4Client
from brokers.models import Broker
from brokers.protocols.jmq4 import HeartbeatRequest
from tests.jmq4.conftest import build_catalog
from tests.jmq4.raw import frame_bytes
from tests.recovery.processes import BrokerProcesses

FRAMES = 100_000
RSS_LIMIT_MB = 256  # stated bound of a broker process under this attack (128 MB idle)
RSS_GROWTH_LIMIT_MB = 80
LOG_LINES_LIMIT = 150  # 20 sampled lines per protocol and minute, plus the broker's own


def _jmq4_malformed() -> bytes:
    """A heartbeat with one byte too many: status 6 (CN_PARAM_ERROR), the stream goes on."""
    frame = bytearray(frame_bytes(HeartbeatRequest(), 11)) + b"\x00"
    struct.pack_into(">i", frame, 0, len(frame))
    return bytes(frame)


def _zbus_malformed() -> bytes:
    """A bad request line: 400, the stream goes on."""
    return b"NOT A REQUEST LINE\r\nid: 1\r\n\r\n"


def _vibemq(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _vibemq_malformed() -> bytes:
    """An unknown command type: an error frame, the stream goes on."""
    return _vibemq(b'{"id":"x","type":"noSuchCommand"}')


def _vibemq_heavy() -> bytes:
    """Just under 1 MiB of JSON whose headers alone would decode into 200,000 lists."""
    body = b'{"id":"h","type":"ping","headers":{"a":[' + b"[]," * 200_000 + b"[]]}}"
    return _vibemq(body)


async def _flood(port: int, frame: bytes, count: int, replies: Callable[[bytes], int]) -> None:
    """Send ``count`` copies of ``frame`` on one connection, reading what comes back, until
    ``replies`` counts one reply per frame (so the broker has handled them all)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received = bytearray()
    seen = 0

    async def read() -> None:
        nonlocal seen
        while chunk := await reader.read(1 << 16):
            received.extend(chunk)
            seen += replies(received)

    reading = asyncio.create_task(read())
    batch = max(1, min(1000, (1 << 20) // len(frame)))
    sent = 0
    while sent < count:
        n = min(batch, count - sent)
        writer.write(frame * n)
        await writer.drain()
        sent += n
    deadline = time.monotonic() + 120
    while seen < count:
        assert time.monotonic() < deadline, f"only {seen} of {count} replies on port {port}"
        assert not reading.done(), f"port {port} closed the connection after {seen} replies"
        await asyncio.sleep(0.05)
    reading.cancel()
    writer.close()


def _counter(own_length_included: bool) -> Callable[[bytearray], int]:
    """Counts (and consumes) complete length-prefixed frames at the start of a buffer: a
    JMQ4 length counts its own 4 bytes, a VibeMQ one does not."""

    def count(buf: bytearray) -> int:
        n = pos = 0
        while len(buf) - pos >= 4:
            (length,) = struct.unpack_from(">I", buf, pos)
            size = length if own_length_included else length + 4
            if len(buf) - pos < size:
                break
            pos += size
            n += 1
        del buf[:pos]
        return n

    return count


def _http_replies(buf: bytearray) -> int:
    """zbus replies: each is a head with content-length and a body."""
    n = 0
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return n
        match = re.search(rb"(?i)content-length:\s*(\d+)", bytes(buf[:end]))
        size = end + 4 + (int(match.group(1)) if match else 0)
        if len(buf) < size:
            return n
        del buf[:size]
        n += 1


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024


async def _valid_client(port: int, token: str, stop: asyncio.Event) -> int:
    """Produces and consumes on ``local`` (led by this broker) until ``stop``; rounds done."""
    rounds = 0
    async with Jmq4Client("127.0.0.1", port, app="app1", token=token, timeout=10) as client:
        while not stop.is_set() or rounds == 0:
            body = f"valid-{rounds}".encode()
            await client.produce("local", [body])
            got = []
            while body not in got:
                batch = await client.fetch("local", long_poll_ms=1000)
                got += [m.body for m in batch]
                await client.ack(batch)
            rounds += 1
    return rounds


async def _attack(ports: dict[str, int], token: str, pid: int) -> tuple[int, float]:
    stop = asyncio.Event()
    valid = asyncio.create_task(_valid_client(ports["jmq4"], token, stop))
    peak = 0.0

    async def watch_rss() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _rss_mb(pid))
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch_rss())
    await asyncio.gather(
        _flood(ports["jmq4"], _jmq4_malformed(), FRAMES, _counter(True)),
        _flood(ports["zbus"], _zbus_malformed(), FRAMES, _http_replies),
        _flood(ports["vibemq"], _vibemq_malformed(), FRAMES, _counter(False)),
        _flood(ports["vibemq"], _vibemq_heavy(), 64, _counter(False)),
    )
    stop.set()
    rounds = await asyncio.wait_for(valid, 30)
    await watcher
    return rounds, peak


@pytest.mark.django_db(transaction=True)
def test_malformed_floods_leave_the_broker_serving_quiet_and_bounded(redis_url, tmp_path):
    catalog = build_catalog(redis_url)
    row = Broker.objects.get(id=1)
    ports = {"jmq4": row.jmq4_port, "zbus": row.zbus_port, "vibemq": row.vibemq_port}
    brokers = BrokerProcesses(redis_url, tmp_path)
    try:
        brokers.start(1, row.vibemq_port)
        pid = brokers.pid(1)
        time.sleep(1)
        lines_before = len(brokers.log(1).splitlines())
        rss_before = _rss_mb(pid)
        started = time.monotonic()
        rounds, peak = asyncio.run(_attack(ports, catalog.token, pid))
        elapsed = time.monotonic() - started
        lines = len(brokers.log(1).splitlines()) - lines_before
        assert brokers.alive(1)
    finally:
        codes = brokers.stop_all()
    print(
        f"floods took {elapsed:.1f}s; valid rounds {rounds}; log lines {lines};"
        f" RSS {rss_before:.0f} MB before, {peak:.0f} MB at most"
    )
    assert rounds >= 1
    assert lines <= LOG_LINES_LIMIT, brokers.log(1)[-3000:]
    assert peak < RSS_LIMIT_MB and peak - rss_before < RSS_GROWTH_LIMIT_MB
    assert codes == {1: 0}
