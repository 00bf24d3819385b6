"""A listening port takes a storm of connections at once, however busy its loop is
(brokers/servers/listening.py): uvloop's own server accepted one connection per turn of
the loop, and a broker busy serving a fleet turns it every 20-40 ms — a reconnecting
fleet's long pollers waited in the accept queue for seconds."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import pytest
import uvloop

from brokers.servers.listening import Listener, listen

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
STORM = 300


class Counted(asyncio.Protocol):
    """Counts the connections made and echoes what it reads."""

    made: list[int] = []
    all_made: asyncio.Event | None = None
    """Set once ``STORM`` connections were made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        Counted.made.append(1)
        if len(Counted.made) == STORM and Counted.all_made is not None:
            Counted.all_made.set()

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


async def _listen_on_a_free_port() -> Listener:
    return await listen(Counted, "127.0.0.1", 0)


async def storm_while_busy(serve=_listen_on_a_free_port) -> tuple[int, int]:
    """(turns of a loop busy 5 ms each turn until a storm of STORM connections was
    accepted, how many were), on the server ``serve`` makes for :class:`Counted`."""
    Counted.made, Counted.all_made = [], asyncio.Event()
    listener = await serve()
    port = listener.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    turns = 0

    def busy() -> None:  # a loop serving a fleet: every turn takes a while
        nonlocal turns
        turns += 1
        time.sleep(0.005)
        loop.call_soon(busy)

    loop.call_soon(busy)
    await asyncio.sleep(0.05)  # busy before the storm comes, as a broker serving a fleet
    # the storm: the kernel completes every handshake while the loop is held here
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(STORM)]
    start = turns
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(Counted.all_made.wait(), 30)
    taken = turns - start
    for c in clients:
        c.close()
    listener.close()
    await listener.wait_closed()
    return taken, len(Counted.made)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_storm_of_connections_is_accepted_in_a_few_turns_of_a_busy_loop(loop):
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        turns, accepted = runner.run(storm_while_busy())
    assert accepted == STORM
    assert turns < 20, turns  # uvloop's create_server: one connection per turn (≥ 300)


@pytest.mark.parametrize("loop", LOOPS)
def test_connections_of_a_listener_talk_and_close_stops_accepting(loop):
    async def scenario() -> None:
        listener = await listen(Counted, "127.0.0.1", 0, reuse_port=True)
        assert isinstance(listener, Listener)
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        listener.close()
        await asyncio.wait_for(listener.wait_closed(), 5)
        writer.write(b"still")  # a connection open before the close stays open
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"still"
        writer.close()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(scenario())


def test_two_listeners_share_a_port_with_reuse_port():
    async def scenario() -> None:
        first = await listen(Counted, "127.0.0.1", 0, reuse_port=True)
        port = first.sockets[0].getsockname()[1]
        second = await listen(Counted, "127.0.0.1", port, reuse_port=True)
        with pytest.raises(OSError):
            await listen(Counted, "127.0.0.1", port)  # without it: the port is taken
        for listener in (first, second):
            listener.close()
            await listener.wait_closed()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())
