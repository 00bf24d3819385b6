"""Retries and dead letters of a consumer group: listing, resending, skipping, purging.

A broadcast client's own retries (``client_id``) are listed and acted on apart from the
group's; dead letters are the group's, whichever client's retry died.

A section of the :class:`~brokers.engine.engine.Engine` facade (a mixin on its shared state).
"""

from __future__ import annotations

from collections.abc import Sequence

from brokers.engine.ack import contiguous
from brokers.engine.keys import RetryKeys
from brokers.engine.model import (
    RetryRecord,
)
from brokers.engine.retry import RetryStore
from brokers.engine.sections.base import EngineBase


class RetrySection(EngineBase):
    """Retries and dead letters of a consumer group."""

    def retry_store(self, topic: str, app: str, client_id: str | None = None) -> RetryStore:
        self.topic(topic)
        return self._retries_of(topic, app, client_id)

    async def retry(
        self, topic: str, app: str, partition: int, indexes: Sequence[int], *, reason: str = "Retry"
    ) -> tuple[int, ...]:
        """Copy stored messages into the consumer group's retry store (no ack)."""
        info = self.topic(topic)
        self._partition(info, partition)
        start, end = contiguous(indexes)
        ids, _ = await self._copy_to_retry(topic, app, partition, start, end, self.now_ms(), reason)
        return ids

    async def retries(
        self,
        topic: str,
        app: str,
        offset: int = 0,
        limit: int = 100,
        *,
        client_id: str | None = None,
    ) -> list[RetryRecord]:
        return await self.retry_store(topic, app, client_id).list_retries(offset, limit)

    async def dead_letters(
        self, topic: str, app: str, offset: int = 0, limit: int = 100
    ) -> list[RetryRecord]:
        return await self.retry_store(topic, app).list_dead_letters(offset, limit)

    async def dead_letter_counts(
        self, groups: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        """Dead letters of many consumer groups ``(topic, app)`` in one pipelined round
        trip, whatever their number; groups of topics not in the catalog are left out."""
        known = [(t, a) for t, a in groups if t in self.catalog.topics]
        if not known:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for topic, app in known:
            pipe.zcard(RetryKeys(topic, app).dlq)
        counts = await pipe.execute()
        return {group: int(n) for group, n in zip(known, counts, strict=True)}

    async def retry_counts(
        self, topic: str, app: str, *, client_id: str | None = None
    ) -> tuple[int, int]:
        """(messages waiting for a retry — the group's, or ``client_id``'s own — dead
        letters)."""
        return await self.retry_store(topic, app, client_id).counts()

    async def resend_dead_letters(self, topic: str, app: str, ids: Sequence[int] = ()) -> int:
        """Dead letters (all if ``ids`` is empty) back to the retry store, due now."""
        return await self.retry_store(topic, app).resend_dead_letters(ids, now_ms=self.now_ms())

    async def skip_dead_letters(self, topic: str, app: str, ids: Sequence[int]) -> int:
        """Delete the chosen dead letters."""
        if not ids:
            return 0
        return await self.retry_store(topic, app).remove("dlq", ids)

    async def purge_dead_letters(
        self, topic: str, app: str, *, before_ms: int | None = None
    ) -> int:
        """Delete every dead letter (or those dead-lettered before ``before_ms``)."""
        return await self.retry_store(topic, app).remove("dlq", before_ms=before_ms)

    async def resend_retries(
        self, topic: str, app: str, ids: Sequence[int] = (), *, client_id: str | None = None
    ) -> int:
        """Make retries (all if ``ids`` is empty) due now."""
        store = self.retry_store(topic, app, client_id)
        return await store.retry_now(ids, now_ms=self.now_ms())

    async def skip_retries(
        self, topic: str, app: str, ids: Sequence[int], *, client_id: str | None = None
    ) -> int:
        """Delete the chosen retries (treated as consumed)."""
        if not ids:
            return 0
        return await self.retry_store(topic, app, client_id).remove("retry", ids)

    async def skip_retries_before(
        self,
        topic: str,
        app: str,
        before_ms: int,
        *,
        business_id: str | None = None,
        client_id: str | None = None,
    ) -> int:
        """Delete the retries that came into the store before ``before_ms`` — only those
        of messages with ``business_id``, when given — as consumed (console-features
        "skip retry messages older than a time, optionally by key"): ``client_id``'s own,
        or without one the group's and every client's (a broadcast consumer's registered
        clients, a fan-out queue's members), as re-consume reaches them."""
        info = self.topic(topic)
        if client_id is not None:
            owners: list[str | None] = [client_id]
        else:
            owners = [
                None,
                *(c for c in await self._each_client(info, self._consumer(topic, app), None) if c),
            ]
        skipped = 0
        for owner in owners:
            store = self._retries_of(topic, app, owner)
            skipped += await store.remove_created_before(before_ms, business_id)
        return skipped

    async def purge_retries(self, topic: str, app: str, *, client_id: str | None = None) -> int:
        """Delete every retry of the consumer group (of ``client_id``)."""
        return await self.retry_store(topic, app, client_id).remove("retry")
