"""The floor of a Python zbus server on this machine (a benchmark reference, not a broker):
``python bench/zbus_floor.py PORT`` serves, on uvloop, the few zbus commands
``bench/zbus_load.py`` sends — produce, consume (``window: 1`` and ``-1``), request and the
replies' produce to ``mq_reply`` — from in-memory deques, with no storage, no catalog, no
policies and no flow control.

``bench/zbus.py`` loads it beside the Java server and ours: what it reaches is what any
single asyncio process could reach on this machine with the same generator, so a goal it
cannot meet is out of reach of a Python broker here, whatever its design. It parses with
the generator's own splitter (written from the spec) and frames each reply with one
format string: less than any real server does per message.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.zbus_load import Msg, Splitter


def _message(status: int, headers: dict[str, str], body: bytes) -> bytes:
    start = f"HTTP/1.1 {status} OK\r\n" if status else "GET / HTTP/1.1\r\n"
    head = start + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"{head}content-length: {len(body)}\r\n\r\n".encode() + body


class Floor:
    """The server's state: MQs as deques of (headers, body), parked window-1 consumers,
    streaming consumers in turn, and connections by id (for replies to ``mq_reply``)."""

    def __init__(self) -> None:
        self.queues: dict[str, collections.deque[tuple[dict[str, str], bytes]]] = (
            collections.defaultdict(collections.deque)
        )
        self.parked: dict[str, collections.deque[tuple[FloorProtocol, str]]] = (
            collections.defaultdict(collections.deque)
        )
        self.streams: dict[str, list[tuple[FloorProtocol, str]]] = collections.defaultdict(list)
        self.turn: dict[str, itertools.count[int]] = collections.defaultdict(itertools.count)
        self.conns: dict[str, FloorProtocol] = {}
        self.ids = itertools.count()

    def put(self, mq: str, headers: dict[str, str], body: bytes) -> None:
        """A message for ``mq``: to a streaming consumer in turn, a parked one, or queued."""
        streams = self.streams.get(mq)
        if streams:
            conn, msgid = streams[next(self.turn[mq]) % len(streams)]
            conn.send(_message(200, {**headers, "msgid": msgid}, body))
            return
        parked = self.parked.get(mq)
        while parked:
            conn, msgid = parked.popleft()
            if not conn.closed:
                conn.send(_message(200, {**headers, "msgid": msgid}, body))
                return
        self.queues[mq].append((headers, body))


class FloorProtocol(asyncio.Protocol):
    """One connection."""

    def __init__(self, floor: Floor) -> None:
        self.floor = floor
        self.splitter = Splitter()
        self.id = f"c{next(floor.ids)}"
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self.floor.conns[self.id] = self

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.floor.conns.pop(self.id, None)
        for streams in self.floor.streams.values():
            streams[:] = [s for s in streams if s[0] is not self]

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        for msg in self.splitter.feed(data):
            self.handle(msg)

    def handle(self, msg: Msg) -> None:
        cmd, mq, msgid = msg.header("cmd"), msg.header("mq") or "", msg.header("msgid") or ""
        floor = self.floor
        if cmd == "produce":
            target = floor.conns.get(mq)
            if target is not None:  # a reply to a caller's mq_reply
                target.send(_message(200, {"msgid": msgid}, msg.body))
            else:
                floor.put(mq, {"mq": mq}, msg.body)
            if msg.header("ack") not in ("0", "false"):
                self.send(_message(200, {"msgid": msgid}, str(int(time.time() * 1000)).encode()))
        elif cmd == "request":
            floor.put(mq, {"mq": mq, "mq_reply": self.id, "msgid_raw": msgid}, msg.body)
        elif cmd == "consume":
            if msg.header("window") == "-1":
                floor.streams[mq].append((self, msgid))
                queue = floor.queues.get(mq)
                while queue:
                    headers, body = queue.popleft()
                    self.send(_message(200, {**headers, "msgid": msgid}, body))
                return
            queue = floor.queues.get(mq)
            if queue:
                headers, body = queue.popleft()
                self.send(_message(200, {**headers, "msgid": msgid}, body))
            else:
                floor.parked[mq].append((self, msgid))
        elif cmd == "admin":  # create_mq: MQs exist on first use
            self.send(_message(200, {"msgid": msgid}, b""))
        else:
            self.send(_message(400, {"msgid": msgid}, b"unknown command"))


async def serve(port: int) -> None:
    """Serve on 127.0.0.1:``port`` until cancelled; prints "ready" once listening."""
    floor = Floor()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FloorProtocol(floor), "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        import uvloop  # as our brokers run

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    asyncio.run(serve(int(sys.argv[1])))
