"""A TCP proxy to Redis that cuts one connection between a command and its reply."""

from __future__ import annotations

import asyncio
import contextlib


class Cutter:
    """Forwards 127.0.0.1:<ephemeral> to Redis on ``port``. Once :meth:`arm` ed, the next
    connection to send bytes containing ``marker`` is closed 0.2 s after they reached Redis
    (time enough to run them), without relaying the reply: the client cannot know whether
    its command ran."""

    def __init__(self, port: int, *, marker: bytes) -> None:
        self.port, self.marker = port, marker
        self.cuts = 0
        self._armed = False
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/0"

    def arm(self) -> None:
        self._armed = True

    async def __aenter__(self) -> Cutter:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        cut = asyncio.Event()

        async def replies() -> None:
            while data := await up_reader.read(65536):
                if cut.is_set():
                    continue  # the reply is dropped
                writer.write(data)
                await writer.drain()

        async def commands() -> None:
            while data := await reader.read(65536):
                hit = self._armed and self.marker in data
                if hit:
                    self._armed = False
                    self.cuts += 1
                    cut.set()
                up_writer.write(data)
                await up_writer.drain()
                if hit:
                    await asyncio.sleep(0.2)
                    return

        pumps = [asyncio.create_task(replies()), asyncio.create_task(commands())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()
            self._tasks.discard(task)
