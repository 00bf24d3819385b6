"""Transactions: prepare, produce into, commit, roll back, compensation feedback, sweep.

A section of the :class:`~brokers.engine.engine.Engine` facade (a mixin on its shared state).
"""

from __future__ import annotations

from collections.abc import Sequence

from brokers.engine.append import choose_partition
from brokers.engine.errors import (
    EngineError,
    InvalidMessage,
)
from brokers.engine.model import (
    QoS,
    TransactionInfo,
)
from brokers.engine.record import (
    Message,
)
from brokers.engine.sections.base import EngineBase, how_many
from brokers.engine.transactions import Transactions
from brokers.engine.wire import WireBlob, WireRecords, check_wire


class TransactionSection(EngineBase):
    """Transactions."""

    def _tx(self, topic: str, app: str) -> Transactions:
        self.topic(topic)
        return Transactions(self.redis, self.durability, topic, app)

    async def prepare_transaction(
        self,
        topic: str,
        app: str,
        *,
        transaction_id: str = "",
        timeout_ms: int = 1_800_000,
        client_address: str | None = None,
    ) -> str:
        """Open a transaction (JMQ4 PREPARE) past the gate; the broker-generated txId."""
        try:
            self.gate.producer(topic, app, client_address)
        except EngineError as exc:
            self._refused(topic, app, exc)
            raise
        return await self._tx(topic, app).prepare(transaction_id, timeout_ms, self.now_ms())

    async def append_to_transaction(
        self,
        topic: str,
        app: str,
        tx_id: str,
        messages: Sequence[Message | bytes] | WireRecords | WireBlob,
        *,
        partition: int | None = None,
        client_address: str | None = None,
    ) -> int:
        """Log messages in an open transaction (not visible until commit); messages logged.

        The gate checks the producer policy and takes the rate limit's permits here, when
        the messages are given; the commit appends what was logged."""
        try:
            return await self._append_to_transaction(
                topic, app, tx_id, messages, partition=partition, client_address=client_address
            )
        except EngineError as exc:
            self._refused(topic, app, exc, max(1, how_many(messages)))
            raise

    async def _append_to_transaction(
        self,
        topic: str,
        app: str,
        tx_id: str,
        messages: Sequence[Message | bytes] | WireRecords | WireBlob,
        *,
        partition: int | None,
        client_address: str | None,
    ) -> int:
        if not messages:
            raise InvalidMessage("no messages")
        policy = self.gate.producer(topic, app, client_address)
        snap = self._catalog()
        info = self.topic(topic)
        if isinstance(messages, WireBlob):
            messages = check_wire(messages.blob, messages.count, self.max_body)
        first = None if isinstance(messages, WireRecords) else messages[0]
        chosen = choose_partition(
            snap,
            info,
            policy,
            partition=partition,
            business_id=first.business_id if isinstance(first, Message) else "",
            turns=self._turns,
            app=app,
        )
        wire = self._wire(messages)
        now = self.now_ms()
        if wire is not None:
            stamped = wire.stamp(partition=chosen, now_ms=now, client_address=client_address)
            records = wire.records(stamped)
        else:
            records = self._encode(messages, app, chosen, now, client_address)  # type: ignore[arg-type]
        await self.gate.admit_produce(policy, sum(c for _, c in records))
        return await self._tx(topic, app).add(tx_id, [(chosen, r, c) for r, c in records])

    async def commit_transaction(
        self,
        topic: str,
        app: str,
        tx_id: str,
        *,
        qos: QoS = QoS.RECEIVED,
        client_address: str | None = None,
    ) -> dict[int, int]:
        """Append the transaction's messages (atomic per partition, idempotent) past the
        gate: the commit is the write, so a producer policy deleted (or a client
        blacklisted) since the messages were logged refuses it; the transaction stays
        open, to be rolled back or to expire. A commit the sweep finishes was decided
        before, and is not gated again."""
        try:
            self.gate.producer(topic, app, client_address)
        except EngineError as exc:
            self._refused(topic, app, exc)
            raise
        return await self._tx(topic, app).commit(tx_id, qos)

    async def rollback_transaction(self, topic: str, app: str, tx_id: str) -> None:
        """Discard an open transaction (TransactionNotFound if it is not open)."""
        await self._tx(topic, app).rollback(tx_id)

    async def transaction_feedback(self, topic: str, app: str) -> TransactionInfo | None:
        """One overdue open transaction with a query id (JMQ4 FETCH_PRODUCE_FEEDBACK)."""
        return await self._tx(topic, app).feedback(self.now_ms())

    async def open_transactions(self, topic: str, app: str) -> list[TransactionInfo]:
        return await self._tx(topic, app).open()

    async def sweep_transactions(self, topic: str, app: str) -> int:
        """Drop expired transactions and finish interrupted commits (Celery calls this)."""
        return await self._tx(topic, app).sweep(self.now_ms())
