"""Producer commands (spec §5.2, §5.6): ADD/REMOVE_PRODUCER and PRODUCE_MESSAGE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from brokers.protocols.jmq4.codes import Code, CommandType
from brokers.protocols.jmq4.common import (
    RegistrationRequest,
    RegistrationResponse,
    TopicListRequest,
    read_code,
    write_code,
)
from brokers.protocols.jmq4.header import QosLevel
from brokers.protocols.jmq4.message import BrokerMessage, write_message_item
from brokers.protocols.jmq4.payload import Payload
from brokers.protocols.jmq4.primitives import Reader, Writer

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
    """A PRODUCE_MESSAGE request entry. ``qos_level`` is the raw BYTE (see :attr:`qos`)."""

    topic: str = ""
    tx_id: str = ""
    timeout: int = 0
    qos_level: int = QosLevel.RECEIVE
    messages: tuple[BrokerMessage, ...] = ()

    @property
    def qos(self) -> QosLevel:
        """The durability level: values outside 0–4 mean REPLICATION (§5.6)."""
        return _QOS_LEVELS.get(self.qos_level, QosLevel.REPLICATION)


def _write_produce_topic(w: Writer, entry: ProduceTopic) -> None:
    w.write_s2(entry.topic)
    w.write_s2(entry.tx_id)
    w.write_int(entry.timeout)
    w.write_byte(entry.qos_level)
    w.write_array(entry.messages, write_message_item)


def _read_produce_topic(r: Reader) -> ProduceTopic:
    return ProduceTopic(
        topic=r.read_s2(),
        tx_id=r.read_s2(),
        timeout=r.read_int(),
        qos_level=r.read_byte(),
        messages=r.read_array(BrokerMessage.read),
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceTopicResult:
    """A PRODUCE_MESSAGE response entry: one item per message, or one per batch."""

    topic: str = ""
    code: int = Code.SUCCESS
    items: tuple[ProducedItem, ...] = ()


def _write_item(w: Writer, item: ProducedItem) -> None:
    w.write_short(item.partition)
    w.write_long(item.index)
    w.write_long(item.start_time)


def _read_item(r: Reader) -> ProducedItem:
    return ProducedItem(partition=r.read_short(), index=r.read_long(), start_time=r.read_long())


def _write_result(w: Writer, entry: ProduceTopicResult) -> None:
    w.write_s2(entry.topic)
    write_code(w, entry.code)
    w.write_array(entry.items, _write_item)


def _read_result(r: Reader) -> ProduceTopicResult:
    return ProduceTopicResult(topic=r.read_s2(), code=read_code(r), items=r.read_array(_read_item))


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
