"""Named mailboxes across processes: who owns a name, and a channel to reach its owner.

Some things live in one process's memory (a reply queue held by one connection) but are
addressed from any process of the cluster. A :class:`Mailboxes` of a ``space`` gives its
process a random ``owner`` id and

* a directory: each name the process owns is registered under
  :func:`~brokers.engine.keys.mailbox_key` with an opaque entry the caller chose (which
  should say who the owner is), expiring after ``ttl_ms`` unless renewed, and released
  (only if still its own) when the process lets the name go;
* an inbox: the pub/sub channel :func:`~brokers.engine.keys.inbox_channel` of the owner,
  on which every process can :meth:`~Mailboxes.send` it bytes. ``PUBLISH`` counts the
  receivers, so a send to an owner that no longer listens says so;
* optionally a group: the pub/sub channel :func:`~brokers.engine.keys.group_channel` that
  every process whose mailboxes were made with that ``group`` hears once started, on
  which any process can :meth:`~Mailboxes.broadcast`. Its answer is how many processes
  heard, so a sender that asked every member something knows how many answers to wait
  for (a member whose connection died is not counted: Redis drops its subscription with
  it). A member's owner id starts with the group's hash tag, so that on a cluster its
  inbox and the group's channel share a slot, and one subscription (on that slot's node,
  where ``PUBLISH`` to either runs and counts) hears both.

Claims, lookups, releases and sends share the engine's pipelined connection
(:func:`~brokers.engine.redisio.command`: RPC replies crossing processes make thousands a
second; through redis-py's own command path each cost about as much CPU as the rest of
the call), are made once more on a fresh connection when theirs was dead, and report an
unreachable Redis as :class:`~brokers.engine.errors.StoreUnavailable`, as the engine does.

The inbox (and group) subscription is confirmed before :meth:`~Mailboxes.start` returns
(so anything sent after a name is registered is heard) and is remade, every 0.5 s until it
succeeds, when its connection is lost; :attr:`~Mailboxes.listening` says whether it is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from brokers.engine.background import cancel_and_wait
from brokers.engine.keys import group_channel, group_tag, inbox_channel, mailbox_key
from brokers.engine.pubsub import open_pubsub
from brokers.engine.reconnect import log_retried, retry_on_fresh_connection, store_errors
from brokers.engine.redisio import AnyRedis, Script, command

log = logging.getLogger(__name__)

RESUBSCRIBE_DELAY = 0.5
"""Seconds between attempts to subscribe the inbox again after its connection was lost."""

_RELEASE_IF_MINE = Script("""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
""")


class Mailboxes:
    """This process's mailboxes of ``space``: its directory entries, its inbox and, with a
    ``group`` (no braces in it), its membership of that group."""

    def __init__(self, redis: AnyRedis, space: str, ttl_ms: int, group: str | None = None) -> None:
        self._redis, self.space, self.ttl_ms = redis, space, ttl_ms
        tag = "" if group is None else group_tag(space, group)
        self.owner = tag + uuid.uuid4().hex
        self._pubsub: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._on_message: Callable[[bytes], None] = lambda _data: None
        self._group = None if group is None else group_channel(space, group)
        """The group's channel (None: no group)."""
        self._on_group: Callable[[bytes], None] = lambda _data: None
        self._listening = False

    # ------------------------------------------------------------------ directory

    @store_errors
    async def claim(self, name: str, entry: bytes) -> None:
        """Register ``entry`` (this owner's) under ``name`` for ``ttl_ms``."""
        await self._call("SET", mailbox_key(self.space, name), entry, "PX", self.ttl_ms)

    @store_errors
    async def release(self, name: str, entry: bytes) -> None:
        """Remove ``name``'s registration unless another owner took the name since."""
        key = mailbox_key(self.space, name)
        await retry_on_fresh_connection(  # safe to repeat: it removes only its own entry
            lambda _again: _RELEASE_IF_MINE(self._redis, [key], [entry])
        )

    @store_errors
    async def lookup(self, name: str) -> bytes | None:
        """The entry registered under ``name``, or None."""
        raw = await self._call("GET", mailbox_key(self.space, name))
        return None if raw is None else bytes(raw)

    async def renew(self, entries: Iterable[tuple[str, bytes]]) -> None:
        """Renew (or restore) the registrations ``(name, entry)`` in one round trip."""
        entries = list(entries)
        if not entries:
            return
        pipe = self._redis.pipeline(transaction=False)
        for name, entry in entries:
            pipe.set(mailbox_key(self.space, name), entry, px=self.ttl_ms)
        await pipe.execute()

    # ------------------------------------------------------------------ inbox

    @store_errors
    async def send(self, owner: str, data: bytes) -> bool:
        """Publish ``data`` on ``owner``'s inbox; False when no process listens there."""
        return bool(await self._call("PUBLISH", inbox_channel(self.space, owner), data))

    @store_errors
    async def broadcast(self, group: str, data: bytes) -> int:
        """Publish ``data`` to every process that joined ``group``; how many heard it."""
        return int(await self._call("PUBLISH", group_channel(self.space, group), data))

    @property
    def listening(self) -> bool:
        """Whether the inbox (and group) subscription is up: while it is being remade
        after a lost connection, nothing sent to this owner is heard."""
        return self._listening

    async def _call(self, *args: Any) -> Any:
        """One command on the pipelined connection, made once more on a fresh one when
        its own was dead (each call here is safe to repeat: a read, a set of the same
        value, a publish whose repeat at worst hands a reply twice)."""
        return await retry_on_fresh_connection(lambda _again: command(self._redis, *args))

    async def start(
        self,
        on_message: Callable[[bytes], None],
        on_group: Callable[[bytes], None] | None = None,
    ) -> None:
        """Subscribe to this owner's inbox (confirmed) and call ``on_message`` with every
        message sent to it, from a background task; a member of a group hears the group
        too, and calls ``on_group`` with every broadcast to it (its own included)."""
        self._on_message = on_message
        if on_group is not None:
            self._on_group = on_group
        await self._subscribe()
        self._listener = asyncio.get_running_loop().create_task(
            self._listen(), name=f"inbox-{self.space}"
        )

    async def stop(self) -> None:
        """Stop listening (registrations are the caller's to release)."""
        await cancel_and_wait(self._listener)
        self._listener = None
        await self._unsubscribe()
        await self._close_pubsub()

    async def _unsubscribe(self) -> None:
        """Leave the inbox channel and wait for Redis to confirm it, so that a send after
        :meth:`stop` is told nobody listens. Closing the connection alone left Redis
        counting the subscriber until it noticed the close: a send meanwhile reported a
        listener that would never read it. A connection already lost is closed as is."""
        self._listening = False
        if self._pubsub is None:
            return
        with contextlib.suppress(Exception):
            channels = self._channels()
            await self._pubsub.unsubscribe(*channels)
            await self._confirmed("unsubscribe", len(channels))

    def _channels(self) -> list[str]:
        inbox = inbox_channel(self.space, self.owner)
        return [inbox] if self._group is None else [self._group, inbox]

    async def _subscribe(self) -> None:
        self._pubsub = open_pubsub(self._redis)
        channels = self._channels()
        await self._pubsub.subscribe(*channels)
        await self._confirmed("subscribe", len(channels))
        self._listening = True

    async def _confirmed(self, kind: str, channels: int) -> None:
        """Wait (at most 5 s) until Redis confirmed ``kind`` for ``channels`` channels."""
        async with asyncio.timeout(5.0):
            while channels:
                msg = await self._pubsub.get_message(timeout=1.0)
                if msg is not None and _text(msg.get("type")) == kind:
                    channels -= 1

    async def _close_pubsub(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            self._pubsub = None

    async def _listen(self) -> None:
        while True:
            try:
                # a blocking read, as the notifier's: no poll timer per message (a Temp MQ
                # reply crossing processes is one; RPC sends thousands a second)
                msg = await self._pubsub.get_message(timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._listening = False
                log_retried(log, exc, "inbox %s connection lost; resubscribing", self.space)
                await self._resubscribe()
                continue
            if msg is not None and _text(msg.get("type")) == "message":
                if self._group is not None and _text(msg.get("channel")) == self._group:
                    self._on_group(msg["data"])
                else:
                    self._on_message(msg["data"])

    async def _resubscribe(self) -> None:
        while True:
            await self._close_pubsub()
            await asyncio.sleep(RESUBSCRIBE_DELAY)
            try:
                await self._subscribe()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("inbox %s: subscribing failed; retrying", self.space, exc_info=True)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
