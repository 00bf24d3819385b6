"""What the processes of a cluster share besides messages: presence of members, named
mailboxes, reports on a board, the clients connected to them, partitions in turn,
partition-group assignment, whether the store answers, how far its replicas are behind
and how full it is. Front-ends keep no Redis data of their own; they use these.

A section of the :class:`~brokers.engine.engine.Engine` facade (a mixin on its shared state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from brokers.engine.assignment import GroupAssigner
from brokers.engine.clients import ClientRow, Clients, InventoryRow
from brokers.engine.mailbox import Mailboxes
from brokers.engine.presence import Presence
from brokers.engine.replicas import ReplicaLag, replica_lags
from brokers.engine.reports import publish_report, read_reports, withdraw_report
from brokers.engine.rotation import next_in_turn
from brokers.engine.sections.base import EngineBase
from brokers.engine.store_usage import StoreNode, store_nodes, stored_messages

PING_TIMEOUT = 2.0
"""Seconds :meth:`ClusterSection.ping` waits for the store."""


class ClusterSection(EngineBase):
    """State the processes of a cluster share about themselves."""

    assigner: GroupAssigner
    clients: Clients

    def client_connected(
        self, address: str, app: str, protocol: str, language: str = "", version: str = ""
    ) -> None:
        """A connection of ``app``'s client from ``address`` said who it is (protocol,
        and the language and version the client stated): counted as live until
        :meth:`client_disconnected` or this process's end (:mod:`brokers.engine.clients`)."""
        self.clients.connected(address, app, protocol, language, version)

    def client_disconnected(self, address: str) -> None:
        """The connection from ``address`` closed."""
        self.clients.disconnected(address)

    def client_described(
        self, address: str, app: str, protocol: str, language: str = "", version: str = ""
    ) -> None:
        """A client of ``app`` that keeps no connection (one request) from ``address``
        said what it is; its produces and consumes are listed under that."""
        self.clients.described(address, app, protocol, language, version)

    async def clients_of(self, apps: Sequence[str]) -> dict[str, list[ClientRow]]:
        """Each app's client hosts by kind of client: live connections across every
        process, and the topics each produced to or consumed from lately."""
        await self.clients.flush()
        return await self.clients.of_apps(apps)

    async def client_inventory(self) -> list[InventoryRow]:
        """Every kind of client on the platform (protocol, language, version) with its
        apps, hosts and live connections."""
        await self.clients.flush()
        return await self.clients.inventory()

    def presence(self, space: str, owner: str, ttl_ms: int) -> Presence:
        """``owner``'s (this process's) entries in the rooms of ``space``, each counting
        for ``ttl_ms`` unless renewed (:mod:`brokers.engine.presence`)."""
        return Presence(self.redis, space, owner, ttl_ms, self.now_ms)

    def mailboxes(self, space: str, ttl_ms: int, group: str | None = None) -> Mailboxes:
        """This process's named mailboxes of ``space`` and its inbox
        (:mod:`brokers.engine.mailbox`); registrations expire after ``ttl_ms``; with a
        ``group``, it hears that group's broadcasts once started."""
        return Mailboxes(self.redis, space, ttl_ms, group)

    async def publish_report(
        self, board: str, name: str, doc: Mapping[str, Any], *, valid_for_s: float
    ) -> None:
        """Put ``doc`` on ``board`` as ``name``'s report for ``valid_for_s`` seconds."""
        await publish_report(self.redis, name, doc, valid_for_s=valid_for_s, board=board)

    async def read_reports(
        self, board: str, names: Sequence[str] | None = None
    ) -> dict[str, dict[str, Any]]:
        """The valid reports on ``board`` (of ``names`` only, when given), by name; each
        without its ``valid_until``."""
        found = await read_reports(self.redis, board=board, names=names)
        for doc in found.values():
            doc.pop("valid_until", None)
        return found

    async def withdraw_report(self, board: str, name: str) -> None:
        """Take ``name``'s report off ``board``."""
        await withdraw_report(self.redis, name, board=board)

    async def partition_in_turn(self, topic: str) -> int:
        """The next partition of ``topic`` round robin, shared by every process."""
        return await next_in_turn(self.redis, topic, self.topic(topic).partitions)

    async def assign_groups(
        self,
        topic: str,
        app: str,
        member: str,
        group_ids: Sequence[int],
        *,
        session_timeout_ms: int,
        now_ms: int,
    ) -> tuple[int, ...]:
        """Release ``member``'s partition groups of (topic, app) and give it its share of
        ``group_ids`` (:mod:`brokers.engine.assignment`)."""
        return await self.assigner.assign(
            topic, app, member, group_ids, session_timeout_ms=session_timeout_ms, now_ms=now_ms
        )

    async def replica_lags(self) -> list[ReplicaLag]:
        """How far behind its master each replica of the store is (:mod:`.replicas`)."""
        return await replica_lags(self.redis)

    async def store_nodes(self) -> list[StoreNode]:
        """Each master of the store with its memory in use, its limit and its keys
        (:mod:`.store_usage`)."""
        return await store_nodes(self.redis)

    async def stored_messages(self, topics: Sequence[tuple[str, int]]) -> dict[str, int]:
        """Messages stored now per topic of ``(topic, partitions)``: a few pipelined
        round trips for a whole fleet (:mod:`.store_usage`)."""
        return await stored_messages(self.redis, topics)

    async def ping(self) -> str | None:
        """None when the store answers within :data:`PING_TIMEOUT` seconds, else what went
        wrong (the exception's class name)."""
        try:
            await asyncio.wait_for(self.redis.ping(), PING_TIMEOUT)
        except Exception as exc:
            return type(exc).__name__
        return None
