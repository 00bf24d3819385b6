"""Producer commands (spec §5.2, §5.6): ADD/REMOVE_PRODUCER and PRODUCE_MESSAGE."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Self, overload

from brokers.protocols.jmq4.codes import Code, CommandType
from brokers.protocols.jmq4.common import (
    RegistrationRequest,
    RegistrationResponse,
    TopicListRequest,
    read_code,
    write_code,
)
from brokers.protocols.jmq4.errors import EncodeError
from brokers.protocols.jmq4.header import QosLevel
from brokers.protocols.jmq4.message import BrokerMessage, write_message_item
from brokers.protocols.jmq4.payload import Payload
from brokers.protocols.jmq4.primitives import Reader, Writer
from brokers.protocols.jmq4.wire import WireMessages, read_wire_messages

_QOS_LEVELS = {member.value: member for member in QosLevel}


@dataclass(frozen=True, slots=True)
class AddProducerRequest(RegistrationRequest):
    """ADD_PRODUCER (5): ``A{topic S2}, app S2, sequence LONG``."""

    TYPE = CommandType.ADD_PRODUCER


@dataclass(frozen=True, slots=True)
class AddProducerResponse(RegistrationResponse):
    """ADD_PRODUCER response (−5): ``A{topic S2, id S2}``."""

    TYPE = CommandType.ADD_PRODUCER_RESPONSE


@dataclass(frozen=True, slots=True)
class RemoveProducerRequest(TopicListRequest):
    """REMOVE_PRODUCER (6): ``A{topic S2}, app S2``; answered with a BooleanAck."""

    TYPE = CommandType.REMOVE_PRODUCER


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceTopic:
    """A PRODUCE_MESSAGE request entry. ``qos_level`` is the raw BYTE (see :attr:`qos`).

    ``messages`` is a tuple of :class:`BrokerMessage` or, when decoded, a
    :class:`WireMessages` (equal to the tuple of the same messages).
    """

    topic: str = ""
    tx_id: str = ""
    timeout: int = 0
    qos_level: int = QosLevel.RECEIVE
    messages: Sequence[BrokerMessage] = ()

    @property
    def qos(self) -> QosLevel:
        """The durability level: values outside 0–4 mean REPLICATION (§5.6)."""
        return _QOS_LEVELS.get(self.qos_level, QosLevel.REPLICATION)


def _write_produce_topic(w: Writer, entry: ProduceTopic) -> None:
    w.write_s2(entry.topic)
    w.write_s2(entry.tx_id)
    w.write_int(entry.timeout)
    w.write_byte(entry.qos_level)
    if isinstance(entry.messages, WireMessages):
        entry.messages.write(w)
    else:
        w.write_array(entry.messages, write_message_item)


def _read_produce_topic(r: Reader) -> ProduceTopic:
    return ProduceTopic(
        topic=r.read_s2(),
        tx_id=r.read_s2(),
        timeout=r.read_int(),
        qos_level=r.read_byte(),
        messages=read_wire_messages(r),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceMessageRequest(Payload):
    """PRODUCE_MESSAGE (50): ``A{topic S2, txId S2, timeout INT, qosLevel BYTE, A{MSG}}, app``."""

    TYPE = CommandType.PRODUCE_MESSAGE

    topics: tuple[ProduceTopic, ...] = ()
    app: str = ""

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_produce_topic)
        w.write_s2(self.app)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_produce_topic), app=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducedItem:
    """Where a message (or a whole batch) was stored; (−1, −1, −1) for a failed topic."""

    partition: int = -1
    index: int = -1
    start_time: int = -1


FAILED_ITEM = ProducedItem()


_ITEM = struct.Struct(">hqq")


class ProducedItems(Sequence[ProducedItem]):
    """The items of one partition's append, without an object per item.

    Item ``i`` is ``(partition, indexes[i], start_times[i])``; the sequence compares equal
    to the tuple of those :class:`ProducedItem` and is written with one pack per item.
    """

    __slots__ = ("indexes", "partition", "start_times")
    partition: int
    indexes: Sequence[int]
    start_times: Sequence[int]

    def __init__(self, partition: int, indexes: Sequence[int], start_times: Sequence[int]) -> None:
        if len(indexes) != len(start_times):
            raise ValueError("one index and one start time per item")
        setattr_ = object.__setattr__
        setattr_(self, "partition", partition)
        setattr_(self, "indexes", indexes)
        setattr_(self, "start_times", start_times)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ProducedItems is immutable (setting {name})")

    def __len__(self) -> int:
        return len(self.indexes)

    @overload
    def __getitem__(self, index: int) -> ProducedItem: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[ProducedItem, ...]: ...

    def __getitem__(self, index: int | slice) -> ProducedItem | tuple[ProducedItem, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        return ProducedItem(
            partition=self.partition, index=self.indexes[index], start_time=self.start_times[index]
        )

    def __iter__(self) -> Iterator[ProducedItem]:
        for index, start_time in zip(self.indexes, self.start_times, strict=True):
            yield ProducedItem(partition=self.partition, index=index, start_time=start_time)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ProducedItems | tuple):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"ProducedItems({list(self)!r})"

    def write(self, w: Writer) -> None:
        """Append ``A{partition SHORT, index LONG, startTime LONG}``."""
        w.write_count(len(self))
        try:
            w.write_raw(
                b"".join(map(_ITEM.pack, repeat(self.partition), self.indexes, self.start_times))
            )
        except struct.error as exc:
            raise EncodeError(f"produced item not encodable: {exc}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceTopicResult:
    """A PRODUCE_MESSAGE response entry: one item per message, or one per batch.

    ``items`` is a tuple of :class:`ProducedItem` or a :class:`ProducedItems`.
    """

    topic: str = ""
    code: int = Code.SUCCESS
    items: Sequence[ProducedItem] = ()


def _write_item(w: Writer, item: ProducedItem) -> None:
    try:
        w.write_raw(_ITEM.pack(item.partition, item.index, item.start_time))
    except struct.error as exc:
        raise EncodeError(f"produced item {item!r} not encodable: {exc}") from None


def _read_items(r: Reader) -> Sequence[ProducedItem]:
    """``A{partition SHORT, index LONG, startTime LONG}`` with one bounds check and unpack:
    a :class:`ProducedItems` when every item names the same partition (one entry's append
    always does), else a tuple of :class:`ProducedItem`."""
    data = r.read_raw(r.read_count() * _ITEM.size)
    if not data:
        return ()
    partitions, indexes, start_times = zip(*_ITEM.iter_unpack(data), strict=True)
    if partitions.count(partitions[0]) == len(partitions):
        return ProducedItems(partitions[0], indexes, start_times)
    return tuple(
        [
            ProducedItem(partition=p, index=i, start_time=t)
            for p, i, t in zip(partitions, indexes, start_times, strict=True)
        ]
    )


def _write_result(w: Writer, entry: ProduceTopicResult) -> None:
    w.write_s2(entry.topic)
    write_code(w, entry.code)
    if isinstance(entry.items, ProducedItems):
        entry.items.write(w)
    else:
        w.write_array(entry.items, _write_item)


def _read_result(r: Reader) -> ProduceTopicResult:
    return ProduceTopicResult(topic=r.read_s2(), code=read_code(r), items=_read_items(r))


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceMessageResponse(Payload):
    """PRODUCE_MESSAGE response (−50): ``A{topic S2, code INT, A{partition, index, startTime}}``."""

    TYPE = CommandType.PRODUCE_MESSAGE_RESPONSE

    topics: tuple[ProduceTopicResult, ...] = ()

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_result)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_result))
