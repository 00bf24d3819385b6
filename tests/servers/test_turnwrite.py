"""What a protocol writes in one loop turn leaves in one write; what handling a read writes
leaves when the read is handled (brokers.servers.turnwrite)."""

from __future__ import annotations

import asyncio

from brokers.servers.turnwrite import TurnWriter


class Recorder:
    """A transport that records each write call (what reaches one system call)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


def _writer() -> tuple[TurnWriter, Recorder]:
    out, transport = TurnWriter(), Recorder()
    out.transport = transport  # type: ignore[assignment]
    return out, transport


async def test_what_one_turn_writes_leaves_in_one_write_at_its_end() -> None:
    out, transport = _writer()
    assert out.write(b"a") and out.write(b"b")
    assert transport.writes == [] and out.pending_bytes == 2
    await asyncio.sleep(0)
    assert transport.writes == [b"ab"]


async def test_what_a_held_read_writes_leaves_on_release_in_one_write() -> None:
    out, transport = _writer()
    out.hold()
    out.write(b"a")
    out.write(b"b")
    await asyncio.sleep(0)  # held: nothing scheduled
    assert transport.writes == []
    out.release()
    assert transport.writes == [b"ab"]
    await asyncio.sleep(0)
    assert transport.writes == [b"ab"]  # nothing written twice
    out.write(b"c")  # released: back to the end of the turn
    assert transport.writes == [b"ab"]
    await asyncio.sleep(0)
    assert transport.writes == [b"ab", b"c"]


async def test_a_release_writes_what_was_queued_before_the_hold_first() -> None:
    out, transport = _writer()
    out.write(b"a")  # a flush is scheduled
    out.hold()
    out.write(b"b")
    out.release()
    assert transport.writes == [b"ab"]
    await asyncio.sleep(0)  # the scheduled flush finds nothing
    assert transport.writes == [b"ab"]
