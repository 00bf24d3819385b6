"""The HTTP-MQ serving processes' loop accepts a storm of connections at once
(proxy/httpmq/accepting_loop.py): uvicorn's ``create_server(sock=...)`` on uvloop took
one connection per turn of a busy loop."""

from __future__ import annotations

import asyncio
import socket

from brokers.servers.listening import Listener
from proxy.httpmq.accepting_loop import AcceptingLoop
from proxy.httpmq.server import listen_socket
from tests.servers.test_listening import STORM, Counted, storm_while_busy


async def _as_uvicorn_does() -> Listener:
    sock: socket.socket = listen_socket("127.0.0.1", 0)
    server = await asyncio.get_running_loop().create_server(Counted, sock=sock, backlog=4096)
    assert isinstance(server, Listener)
    return server


def test_uvicorns_create_server_on_a_socket_accepts_a_storm_in_a_few_turns():
    with asyncio.Runner(loop_factory=AcceptingLoop) as runner:
        turns, accepted = runner.run(storm_while_busy(_as_uvicorn_does))
    assert accepted == STORM
    assert turns < 20, turns  # uvloop's own: one connection per turn (≥ 300)


def test_a_server_by_host_and_port_is_uvloops_own():
    async def scenario() -> None:
        server = await asyncio.get_running_loop().create_server(Counted, "127.0.0.1", 0)
        assert type(server).__module__.startswith("uvloop"), type(server)
        server.close()
        await server.wait_closed()

    with asyncio.Runner(loop_factory=AcceptingLoop) as runner:
        runner.run(scenario())
