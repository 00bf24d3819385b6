"""Consumer commands (spec §5.2, §5.5): ADD/REMOVE_CONSUMER, FETCH_TOPIC_MESSAGE,
FETCH_PARTITION_MESSAGE, COMMIT_ACK, COMMIT_ACK_INDEX and FETCH_INDEX.

Responses are nested ``topic → partition`` arrays; the top-level count is always the number
of topic entries (the reference's (topic, partition)-pair count for COMMIT_ACK is a bug, §5.5).
FETCH_INDEX partition entries carry ``leftIndex, rightIndex`` only at header version ≥ 3.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Self

from brokers.protocols.jmq4.codes import Code, CommandType
from brokers.protocols.jmq4.common import (
    RegistrationRequest,
    RegistrationResponse,
    TopicListRequest,
    read_code,
    read_short_item,
    write_code,
    write_short_item,
)
from brokers.protocols.jmq4.errors import DecodeError
from brokers.protocols.jmq4.message import BrokerMessage, write_message_item
from brokers.protocols.jmq4.payload import Payload
from brokers.protocols.jmq4.primitives import Reader, Writer

INDEX_RANGE_VERSION = 3
RETRY_PARTITION = 32767
ACK_INDEX_MAX = -1
ACK_INDEX_MIN = -2


class RetryType(IntEnum):
    """COMMIT_ACK ``retryType``; any other value is a decode error."""

    NONE = 0
    TIMEOUT = 1
    EXCEPTION = 2
    OTHER = 3


_RETRY_TYPES = {member.value: member for member in RetryType}


@dataclass(frozen=True, slots=True)
class AddConsumerRequest(RegistrationRequest):
    """ADD_CONSUMER (3): ``A{topic S2}, app S2, sequence LONG``."""

    TYPE = CommandType.ADD_CONSUMER


@dataclass(frozen=True, slots=True)
class AddConsumerResponse(RegistrationResponse):
    """ADD_CONSUMER response (−3): ``A{topic S2, id S2}``."""

    TYPE = CommandType.ADD_CONSUMER_RESPONSE


@dataclass(frozen=True, slots=True)
class RemoveConsumerRequest(TopicListRequest):
    """REMOVE_CONSUMER (4): ``A{topic S2}, app S2``; answered with a BooleanAck."""

    TYPE = CommandType.REMOVE_CONSUMER


# --- FETCH_TOPIC_MESSAGE ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicFetch:
    """A FETCH_TOPIC_MESSAGE request entry; ``count ≤ 0`` means the policy batch size."""

    topic: str = ""
    count: int = 0


def _write_topic_fetch(w: Writer, entry: TopicFetch) -> None:
    w.write_s2(entry.topic)
    w.write_short(entry.count)


def _read_topic_fetch(r: Reader) -> TopicFetch:
    return TopicFetch(topic=r.read_s2(), count=r.read_short())


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTopicMessageRequest(Payload):
    """FETCH_TOPIC_MESSAGE (30)."""

    TYPE = CommandType.FETCH_TOPIC_MESSAGE

    topics: tuple[TopicFetch, ...] = ()
    app: str = ""
    ack_timeout: int = 0
    long_poll_timeout: int = 0

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_topic_fetch)
        w.write_s2(self.app)
        w.write_int(self.ack_timeout)
        w.write_int(self.long_poll_timeout)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(
            topics=r.read_array(_read_topic_fetch),
            app=r.read_s2(),
            ack_timeout=r.read_int(),
            long_poll_timeout=r.read_int(),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMessages:
    """A FETCH_TOPIC_MESSAGE response entry."""

    topic: str = ""
    messages: tuple[BrokerMessage, ...] = ()
    code: int = Code.SUCCESS


def _write_topic_messages(w: Writer, entry: TopicMessages) -> None:
    w.write_s2(entry.topic)
    w.write_array(entry.messages, write_message_item)
    write_code(w, entry.code)


def _read_topic_messages(r: Reader) -> TopicMessages:
    return TopicMessages(
        topic=r.read_s2(), messages=r.read_array(BrokerMessage.read), code=read_code(r)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTopicMessageResponse(Payload):
    """FETCH_TOPIC_MESSAGE response (−30): ``A{topic S2, A{MSG}, code INT}``."""

    TYPE = CommandType.FETCH_TOPIC_MESSAGE_RESPONSE

    topics: tuple[TopicMessages, ...] = ()

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_topic_messages)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_topic_messages))


# --- FETCH_PARTITION_MESSAGE -----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionFetch:
    """A partition to read from; ``index`` −1 means the ack index."""

    partition: int = 0
    count: int = 0
    index: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionFetchTopic:
    """A FETCH_PARTITION_MESSAGE request entry."""

    topic: str = ""
    partitions: tuple[PartitionFetch, ...] = ()


def _write_partition_fetch(w: Writer, entry: PartitionFetch) -> None:
    w.write_short(entry.partition)
    w.write_int(entry.count)
    w.write_long(entry.index)


def _read_partition_fetch(r: Reader) -> PartitionFetch:
    return PartitionFetch(partition=r.read_short(), count=r.read_int(), index=r.read_long())


def _write_partition_fetch_topic(w: Writer, entry: PartitionFetchTopic) -> None:
    w.write_s2(entry.topic)
    w.write_array(entry.partitions, _write_partition_fetch)


def _read_partition_fetch_topic(r: Reader) -> PartitionFetchTopic:
    return PartitionFetchTopic(topic=r.read_s2(), partitions=r.read_array(_read_partition_fetch))


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionMessageRequest(Payload):
    """FETCH_PARTITION_MESSAGE (31)."""

    TYPE = CommandType.FETCH_PARTITION_MESSAGE

    topics: tuple[PartitionFetchTopic, ...] = ()
    app: str = ""

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_partition_fetch_topic)
        w.write_s2(self.app)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_partition_fetch_topic), app=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMessages:
    """One partition's messages in a FETCH_PARTITION_MESSAGE response."""

    partition: int = 0
    messages: tuple[BrokerMessage, ...] = ()
    code: int = Code.SUCCESS


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMessagesTopic:
    """A FETCH_PARTITION_MESSAGE response entry."""

    topic: str = ""
    partitions: tuple[PartitionMessages, ...] = ()


def _write_partition_messages(w: Writer, entry: PartitionMessages) -> None:
    w.write_short(entry.partition)
    w.write_array(entry.messages, write_message_item)
    write_code(w, entry.code)


def _read_partition_messages(r: Reader) -> PartitionMessages:
    return PartitionMessages(
        partition=r.read_short(), messages=r.read_array(BrokerMessage.read), code=read_code(r)
    )


def _write_partition_messages_topic(w: Writer, entry: PartitionMessagesTopic) -> None:
    w.write_s2(entry.topic)
    w.write_array(entry.partitions, _write_partition_messages)


def _read_partition_messages_topic(r: Reader) -> PartitionMessagesTopic:
    return PartitionMessagesTopic(
        topic=r.read_s2(), partitions=r.read_array(_read_partition_messages)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionMessageResponse(Payload):
    """FETCH_PARTITION_MESSAGE response (−31)."""

    TYPE = CommandType.FETCH_PARTITION_MESSAGE_RESPONSE

    topics: tuple[PartitionMessagesTopic, ...] = ()

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_partition_messages_topic)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_partition_messages_topic))


# --- COMMIT_ACK and COMMIT_ACK_INDEX ---------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AckEntry:
    """One acknowledged index (the partition is repeated at this level on the wire)."""

    partition: int = 0
    index: int = 0
    retry_type: RetryType = RetryType.NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class AckPartition:
    """The acks for one partition."""

    partition: int = 0
    acks: tuple[AckEntry, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AckTopic:
    """A COMMIT_ACK request entry."""

    topic: str = ""
    partitions: tuple[AckPartition, ...] = ()


def _write_ack(w: Writer, entry: AckEntry) -> None:
    w.write_short(entry.partition)
    w.write_long(entry.index)
    w.write_byte(entry.retry_type)


def _write_ack_partition(w: Writer, entry: AckPartition) -> None:
    w.write_short(entry.partition)
    w.write_array(entry.acks, _write_ack)


_ACK = struct.Struct(">hqb")  # partition SHORT, index LONG, retryType BYTE


def _read_ack_partition(r: Reader) -> AckPartition:
    """The acks of one partition, read in one walk of the array (a fetch of 256 messages is
    acked in one request)."""
    partition, count = r.read_short(), r.read_count()
    data, pos, end = r.window()
    stop = pos + _ACK.size * count
    if stop > end:
        raise DecodeError(f"{count} acks at offset {pos} overrun the data ({end})")
    acks = []
    for p, index, raw_retry in _ACK.iter_unpack(memoryview(data)[pos:stop]):
        retry_type = _RETRY_TYPES.get(raw_retry)
        if retry_type is None:
            raise DecodeError(f"unknown retryType {raw_retry}")
        acks.append(AckEntry(partition=p, index=index, retry_type=retry_type))
    r.seek(stop)
    return AckPartition(partition=partition, acks=tuple(acks))


def _write_ack_topic(w: Writer, entry: AckTopic) -> None:
    w.write_s2(entry.topic)
    w.write_array(entry.partitions, _write_ack_partition)


def _read_ack_topic(r: Reader) -> AckTopic:
    return AckTopic(topic=r.read_s2(), partitions=r.read_array(_read_ack_partition))


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitAckRequest(Payload):
    """COMMIT_ACK (32): ``A{topic S2, A{partition SHORT, A{partition, index, retryType}}}, app``."""

    TYPE = CommandType.COMMIT_ACK

    topics: tuple[AckTopic, ...] = ()
    app: str = ""

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_ack_topic)
        w.write_s2(self.app)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields; an unknown retryType is a :class:`DecodeError`."""
        return cls(topics=r.read_array(_read_ack_topic), app=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionIndex:
    """A COMMIT_ACK_INDEX target: −1 = max (skip everything), −2 = min (replay everything)."""

    partition: int = 0
    index: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AckIndexTopic:
    """A COMMIT_ACK_INDEX request entry."""

    topic: str = ""
    partitions: tuple[PartitionIndex, ...] = ()


def _write_partition_index(w: Writer, entry: PartitionIndex) -> None:
    w.write_short(entry.partition)
    w.write_long(entry.index)


def _read_partition_index(r: Reader) -> PartitionIndex:
    return PartitionIndex(partition=r.read_short(), index=r.read_long())


def _write_ack_index_topic(w: Writer, entry: AckIndexTopic) -> None:
    w.write_s2(entry.topic)
    w.write_array(entry.partitions, _write_partition_index)


def _read_ack_index_topic(r: Reader) -> AckIndexTopic:
    return AckIndexTopic(topic=r.read_s2(), partitions=r.read_array(_read_partition_index))


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitAckIndexRequest(Payload):
    """COMMIT_ACK_INDEX (33): ``A{topic S2, A{partition SHORT, index LONG}}, app S2``."""

    TYPE = CommandType.COMMIT_ACK_INDEX

    topics: tuple[AckIndexTopic, ...] = ()
    app: str = ""

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_ack_index_topic)
        w.write_s2(self.app)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_ack_index_topic), app=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionCode:
    """A partition's result code."""

    partition: int = 0
    code: int = Code.SUCCESS


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitionCodes:
    """A COMMIT_ACK / COMMIT_ACK_INDEX response entry."""

    topic: str = ""
    partitions: tuple[PartitionCode, ...] = ()


def _write_partition_code(w: Writer, entry: PartitionCode) -> None:
    w.write_short(entry.partition)
    write_code(w, entry.code)


def _read_partition_code(r: Reader) -> PartitionCode:
    return PartitionCode(partition=r.read_short(), code=read_code(r))


def _write_topic_codes(w: Writer, entry: TopicPartitionCodes) -> None:
    w.write_s2(entry.topic)
    w.write_array(entry.partitions, _write_partition_code)


def _read_topic_codes(r: Reader) -> TopicPartitionCodes:
    return TopicPartitionCodes(topic=r.read_s2(), partitions=r.read_array(_read_partition_code))


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionCodesResponse(Payload):
    """``A{topic S2, A{partition SHORT, code INT}}`` with the count = number of topic entries."""

    topics: tuple[TopicPartitionCodes, ...] = ()

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_topic_codes)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_topic_codes))


@dataclass(frozen=True, slots=True)
class CommitAckResponse(PartitionCodesResponse):
    """COMMIT_ACK response (−32)."""

    TYPE = CommandType.COMMIT_ACK_RESPONSE


@dataclass(frozen=True, slots=True)
class CommitAckIndexResponse(PartitionCodesResponse):
    """COMMIT_ACK_INDEX response (−33); lists only the failing partitions."""

    TYPE = CommandType.COMMIT_ACK_INDEX_RESPONSE


# --- FETCH_INDEX -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexTopic:
    """A FETCH_INDEX request entry."""

    topic: str = ""
    partitions: tuple[int, ...] = ()


def _write_index_topic(w: Writer, entry: IndexTopic) -> None:
    w.write_s2(entry.topic)
    w.write_array(entry.partitions, write_short_item)


def _read_index_topic(r: Reader) -> IndexTopic:
    return IndexTopic(topic=r.read_s2(), partitions=r.read_array(read_short_item))


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchIndexRequest(Payload):
    """FETCH_INDEX (35): ``A{topic S2, A{partition SHORT}}, app S2``."""

    TYPE = CommandType.FETCH_INDEX

    topics: tuple[IndexTopic, ...] = ()
    app: str = ""

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_index_topic)
        w.write_s2(self.app)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_index_topic), app=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionIndexResult:
    """A partition's ack index (−1 if unknown); left/right travel at version ≥ 3 only."""

    partition: int = 0
    index: int = -1
    code: int = Code.SUCCESS
    left_index: int = 0
    right_index: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexResultTopic:
    """A FETCH_INDEX response entry."""

    topic: str = ""
    partitions: tuple[PartitionIndexResult, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchIndexResponse(Payload):
    """FETCH_INDEX response (−35)."""

    TYPE = CommandType.FETCH_INDEX_RESPONSE

    topics: tuple[IndexResultTopic, ...] = ()

    def write(self, w: Writer, version: int) -> None:
        """Append the fields for header ``version``."""
        with_range = version >= INDEX_RANGE_VERSION

        def write_partition(w: Writer, entry: PartitionIndexResult) -> None:
            w.write_short(entry.partition)
            w.write_long(entry.index)
            write_code(w, entry.code)
            if with_range:
                w.write_long(entry.left_index)
                w.write_long(entry.right_index)

        def write_topic(w: Writer, entry: IndexResultTopic) -> None:
            w.write_s2(entry.topic)
            w.write_array(entry.partitions, write_partition)

        w.write_array(self.topics, write_topic)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields for header ``version``."""
        with_range = version >= INDEX_RANGE_VERSION

        def read_partition(r: Reader) -> PartitionIndexResult:
            partition, index, code = r.read_short(), r.read_long(), read_code(r)
            if not with_range:
                return PartitionIndexResult(partition=partition, index=index, code=code)
            return PartitionIndexResult(
                partition=partition,
                index=index,
                code=code,
                left_index=r.read_long(),
                right_index=r.read_long(),
            )

        def read_topic(r: Reader) -> IndexResultTopic:
            return IndexResultTopic(topic=r.read_s2(), partitions=r.read_array(read_partition))

        return cls(topics=r.read_array(read_topic))
