"""The commands every VibeMQ session runs, whatever carries its frames: the handlers of
:mod:`.handlers` and the publish path of :mod:`.publishing`, given to each session (so the
session module imports neither and no import goes in a circle)."""

from __future__ import annotations

from collections.abc import Sequence

from brokers.protocols.vibemq import Frame, Publish
from brokers.servers.vibemq import handlers, publishing
from brokers.servers.vibemq.session import Session


class SessionCommands:
    """:class:`~brokers.servers.vibemq.session.Commands` of the VibeMQ protocol."""

    max_run = publishing.MAX_RUN

    async def handle(self, session: Session, frame: Frame) -> None:
        await handlers.handle(session, frame)

    async def publish(self, session: Session, frames: Sequence[Publish]) -> None:
        await publishing.publish(session, frames)


COMMANDS = SessionCommands()
