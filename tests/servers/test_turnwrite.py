"""What a protocol writes in one loop turn leaves in one write; what handling a read writes
leaves when the read is handled (brokers.servers.turnwrite)."""

from __future__ import annotations

import asyncio

from brokers.servers import turnwrite
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


async def test_what_handling_a_read_writes_leaves_when_it_is_handled() -> None:
    """Every connection written to while a read is handled (its own answer, a reply to
    another connection's caller) gets one write at the end of the handling."""
    (own, own_t), (other, other_t) = _writer(), _writer()
    held = turnwrite.hold()
    own.write(b"a")
    other.write(b"x")
    own.write(b"b")
    await asyncio.sleep(0)  # held: nothing scheduled
    assert own_t.writes == [] and other_t.writes == []
    turnwrite.release(held)
    assert own_t.writes == [b"ab"] and other_t.writes == [b"x"]
    await asyncio.sleep(0)
    assert own_t.writes == [b"ab"]  # nothing written twice
    own.write(b"c")  # released: back to the end of the turn
    assert own_t.writes == [b"ab"]
    await asyncio.sleep(0)
    assert own_t.writes == [b"ab", b"c"]


async def test_a_release_writes_what_was_queued_before_the_hold_first() -> None:
    out, transport = _writer()
    out.write(b"a")  # a flush is scheduled
    held = turnwrite.hold()
    out.write(b"b")
    turnwrite.release(held)
    assert transport.writes == [b"ab"]
    await asyncio.sleep(0)  # the scheduled flush finds nothing
    assert transport.writes == [b"ab"]


async def test_a_hold_inside_a_hold_releases_only_its_own_writers() -> None:
    (outer_w, outer_t), (inner_w, inner_t) = _writer(), _writer()
    outer = turnwrite.hold()
    outer_w.write(b"o")
    inner = turnwrite.hold()
    inner_w.write(b"i")
    turnwrite.release(inner)
    assert inner_t.writes == [b"i"] and outer_t.writes == []
    turnwrite.release(outer)
    assert outer_t.writes == [b"o"]


async def test_what_reads_of_one_io_phase_write_leaves_after_all_of_them() -> None:
    """``release_after_reads``: the answers of reads handled together go out once every
    one of them is handled — before the loop polls again, each connection in one write,
    in the order written — so a peer woken by the first finds the rest waiting."""
    (a, a_t), (b, b_t) = _writer(), _writer()
    for writer, data in ((a, b"1"), (b, b"2"), (a, b"3")):  # three reads, one after another
        held = turnwrite.hold()
        writer.write(data)
        turnwrite.release_after_reads(held)
        assert a_t.writes == [] and b_t.writes == []
    a.write(b"4")  # outside a read, after them: in the same write
    await asyncio.sleep(0)
    assert a_t.writes == [b"134"] and b_t.writes == [b"2"]
    await asyncio.sleep(0)
    assert a_t.writes == [b"134"] and b_t.writes == [b"2"]  # nothing twice
    held = turnwrite.hold()
    turnwrite.release_after_reads(held)  # a read that wrote nothing schedules nothing
    b.write(b"5")
    await asyncio.sleep(0)
    assert b_t.writes == [b"2", b"5"]


async def test_a_connection_closed_before_the_phase_ends_writes_its_answer_first() -> None:
    """A close flushes (the protocols' ``close``): the deferred flush finds nothing."""
    out, transport = _writer()
    held = turnwrite.hold()
    out.write(b"bye")
    turnwrite.release_after_reads(held)
    out.flush()  # what a protocol's close does before closing its transport
    assert transport.writes == [b"bye"]
    await asyncio.sleep(0)
    assert transport.writes == [b"bye"]


def test_a_loop_that_stopped_before_its_flush_does_not_hold_up_the_next() -> None:
    """The flush is scheduled per loop: one left unrun by a loop that stopped (a test's,
    a server's at shutdown) neither blocks the next loop's nor writes the old writers'."""
    (old, old_t), (new, new_t) = _writer(), _writer()

    def read(writer: TurnWriter, data: bytes) -> None:
        held = turnwrite.hold()
        writer.write(data)
        turnwrite.release_after_reads(held)

    async def read_then_stop() -> None:
        read(old, b"lost")
        asyncio.get_running_loop().stop()  # it stops after this turn, its flush unrun

    stopped = asyncio.new_event_loop()
    stopped.run_until_complete(read_then_stop())
    stopped.close()

    async def read_and_turn() -> None:
        read(new, b"sent")
        await asyncio.sleep(0)

    asyncio.run(read_and_turn())
    assert new_t.writes == [b"sent"] and old_t.writes == []


async def test_holding_says_whether_a_read_is_being_handled() -> None:
    assert not turnwrite.holding()
    outer = turnwrite.hold()
    assert turnwrite.holding()
    inner = turnwrite.hold()
    turnwrite.release(inner)
    assert turnwrite.holding()  # the read's own hold is still open
    turnwrite.release(outer)
    assert not turnwrite.holding()
