"""Delayed and timer messages: held until due, then appended.

A section of the :class:`~brokers.engine.engine.Engine` facade (a mixin on its shared state).
"""

from __future__ import annotations

from brokers.engine.catalog import ProducerPolicyInfo, TopicInfo
from brokers.engine.delay import (
    DELAY_ID,
    KEEP_RELEASED_MS,
    MAX_DELAY_MS,
    MOVER_TTL_MS,
    Delayed,
    DelayStore,
    Held,
    HeldMessage,
    Whereabouts,
    topics_with_delays,
)
from brokers.engine.errors import (
    BrokerNotWritable,
    EngineError,
    InvalidMessage,
    NoWritablePartition,
)
from brokers.engine.model import (
    QoS,
)
from brokers.engine.record import (
    Message,
)
from brokers.engine.sections.base import EngineBase


class DelaySection(EngineBase):
    """Delayed and timer messages."""

    async def append_delayed(
        self,
        topic: str,
        app: str,
        message: Message,
        *,
        deliver_at_ms: int,
        partition: int | None = None,
        client_address: str | None = None,
    ) -> Delayed:
        """Hold ``message`` until ``deliver_at_ms`` (a delayed or timer message; a time
        already past is due at once).

        It is checked now exactly as :meth:`append` would (policy, blacklist, rate limit,
        size) and appended by :meth:`release_delayed` once due. Returns its delay id and
        its partition: ``partition`` when given, else the one :meth:`append` would
        choose now (see :class:`~brokers.engine.delay.Held` for when that changes).
        """
        info = self.topic(topic)
        now = self.now_ms()
        try:
            policy = self.gate.producer(topic, app, client_address)
            if partition is not None and partition >= 0:
                self._partition(info, partition)
            if deliver_at_ms > now + MAX_DELAY_MS:
                raise InvalidMessage("delivery time must be at most 30 days ahead")
            self._encode([message], app, 0, now, client_address)  # validates size and fields
            await self.gate.admit_produce(policy, 1)
        except EngineError as exc:
            self._refused(topic, app, exc)
            raise
        deliver_at_ms = max(deliver_at_ms, now)  # a time already past is due at once
        pinned = partition is not None and partition >= 0
        if not pinned:
            partition = self._turn_of(info, policy, message)
        held = Held(
            app=app,
            partition=partition,
            pinned=pinned,
            client_address=client_address,
            body=bytes(message.body),
            business_id=message.business_id,
            attributes=dict(message.attributes) if message.attributes else None,
            priority=message.priority,
            send_time_ms=message.send_time_ms or now,
        )
        return Delayed(await DelayStore(self.redis, topic).add(held, deliver_at_ms), partition)

    def _turn_of(self, info: TopicInfo, policy: ProducerPolicyInfo, message: Message) -> int | None:
        """The partition :meth:`append` would choose for ``message`` now; None when no
        partition is writable now (the message is held all the same)."""
        try:
            return self._choose_partition(
                self._catalog(), info, policy, policy.app, None, message, message.business_id
            )
        except (NoWritablePartition, BrokerNotWritable):
            return None

    async def release_delayed(self, topic: str, *, limit: int = 1000) -> int:
        """Append this topic's due delayed messages; returns how many were appended."""
        store = DelayStore(self.redis, topic)
        token = await store.lock(ttl_ms=MOVER_TTL_MS)
        if token is None:
            return 0
        moved = 0
        info = self.topic(topic)
        keep_ms = info.retention_max_age_s * 1000 if info.retention_max_age_s else KEEP_RELEASED_MS
        try:
            for delay_id, held in await store.due(self.now_ms(), limit):
                message = Message(
                    body=held.body,
                    business_id=held.business_id,
                    attributes={**(held.attributes or {}), DELAY_ID: str(delay_id)},
                    priority=held.priority,
                    send_time_ms=held.send_time_ms,
                )
                try:
                    result = await self._append(
                        topic,
                        held.app,
                        [message],
                        partition=held.partition,
                        qos=QoS.RECEIVED,
                        client_address=held.client_address,
                    )
                except BrokerNotWritable:
                    if held.pinned or held.partition is None:
                        raise
                    result = await self._append(  # its turn's partition went: another
                        topic,
                        held.app,
                        [message],
                        partition=None,
                        qos=QoS.RECEIVED,
                        client_address=held.client_address,
                    )
                await store.moved(
                    delay_id,
                    result.partition,
                    result.first_index,
                    now_ms=self.now_ms(),
                    keep_ms=keep_ms,
                )
                moved += 1
            await store.forget_if_empty()
        finally:
            await store.unlock(token)
        return moved

    async def release_all_delayed(self) -> int:
        """Release the due delayed messages of every topic that holds some."""
        moved = 0
        for topic in await topics_with_delays(self.redis):
            if topic in self._catalog().topics:
                moved += await self.release_delayed(topic)
        return moved

    async def delayed_whereabouts(self, topic: str, delay_id: int) -> Whereabouts:
        """Where the message :meth:`append_delayed` held as ``delay_id`` is: still held
        (and until when), appended (at which position), or unknown."""
        self.topic(topic)
        return await DelayStore(self.redis, topic).where(delay_id)

    async def delayed_pending(self, topic: str) -> int:
        """How many delayed messages of ``topic`` wait for their time."""
        return await DelayStore(self.redis, topic).pending()

    async def delayed_messages(
        self,
        topic: str,
        *,
        offset: int = 0,
        limit: int = 50,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
    ) -> tuple[int, list[HeldMessage]]:
        """The delayed messages ``topic`` holds, soonest due first, optionally only those
        due within [``due_from_ms``, ``due_to_ms``]: (how many match, one page of them)."""
        self.topic(topic)
        return await DelayStore(self.redis, topic).page(
            offset=offset, limit=limit, due_from_ms=due_from_ms, due_to_ms=due_to_ms
        )

    async def delayed_message(self, topic: str, delay_id: int) -> HeldMessage | None:
        """The delayed message ``topic`` holds as ``delay_id``; None when it is not held
        (released, cancelled or unknown)."""
        self.topic(topic)
        return await DelayStore(self.redis, topic).one(delay_id)

    async def cancel_delayed(self, topic: str, delay_ids: list[int]) -> list[int]:
        """Cancel held delayed messages of ``topic``: they are never appended. Returns the
        ids cancelled; an id already released (or unknown) is left out."""
        self.topic(topic)
        if not delay_ids:
            return []
        return await DelayStore(self.redis, topic).cancel(sorted(set(delay_ids)))
