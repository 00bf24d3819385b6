"""The shared server flow control: replies of one loop turn leave in one write, in order,
and closing flushes what was queued; a closed connection takes nothing."""

from __future__ import annotations

import asyncio

from brokers.servers.flow import FlowControlled


class RecordingTransport(asyncio.Transport):
    """Records what is written (a stand-in for the socket transport)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def _connected() -> tuple[FlowControlled, RecordingTransport]:
    proto = FlowControlled()
    transport = RecordingTransport()
    proto._transport = transport
    return proto, transport


async def test_replies_of_one_turn_leave_in_one_write_in_order():
    proto, transport = _connected()
    assert proto.send(b"a") and proto.send(b"bc") and proto.send(b"d")
    assert transport.writes == []
    await asyncio.sleep(0)
    assert transport.writes == [b"abcd"]
    proto.send(b"e")
    await asyncio.sleep(0)
    assert transport.writes == [b"abcd", b"e"]


async def test_close_flushes_what_was_queued_and_later_sends_are_refused():
    proto, transport = _connected()
    proto.send(b"last words")
    proto.close()
    assert transport.writes == [b"last words"] and transport.closed
    assert not proto.send(b"too late")
    await asyncio.sleep(0)
    assert transport.writes == [b"last words"]


async def test_a_lost_connection_drops_the_queue():
    proto, transport = _connected()
    proto.send(b"x")
    proto._transport = None  # connection_lost
    await asyncio.sleep(0)
    assert transport.writes == []
