"""Metadata and coordinator commands (spec §5.3, §5.4): FETCH_CLUSTER, FIND_COORDINATOR and
FETCH_ASSIGNED_PARTITION.

FETCH_CLUSTER responses depend on the request header version: broker entries gain
``sysCode, permission`` at version ≥ 2 and topic entries gain ``params`` at version ≥ 4.
Fields absent in an older version decode as their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

from brokers.protocols.jmq4.codes import Code, CommandType
from brokers.protocols.jmq4.common import (
    TopicListRequest,
    read_code,
    read_s2_item,
    read_short_item,
    write_code,
    write_s2_item,
    write_short_item,
)
from brokers.protocols.jmq4.errors import DecodeError, EncodeError
from brokers.protocols.jmq4.payload import Payload
from brokers.protocols.jmq4.primitives import Reader, Writer

BROKER_FIELDS_VERSION = 2
TOPIC_PARAMS_VERSION = 4
PERMISSION_READ = 1
PERMISSION_WRITE = 2


class TopicType(IntEnum):
    """The topic entry's ``topicType`` BYTE."""

    NONE = -1
    TOPIC = 0
    BROADCAST = 1


_TOPIC_TYPES = {member.value: member for member in TopicType}


@dataclass(frozen=True, slots=True)
class FetchClusterRequest(TopicListRequest):
    """FETCH_CLUSTER (10): ``A{topic S2}, app S2``."""

    TYPE = CommandType.FETCH_CLUSTER


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerPolicy:
    """A topic entry's producer policy; ``weights`` are (brokerId, weight) pairs."""

    nearby: bool = False
    single: bool = False
    archive: bool = False
    weights: tuple[tuple[str, int], ...] = ()
    black_list: tuple[str, ...] = ()
    timeout: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerPolicy:
    """A topic entry's consumer policy. ``removed`` is always false on the wire."""

    nearby: bool = False
    paused: bool = False
    archive: bool = False
    retry: bool = False
    seq: bool = False
    ack_timeout: int = 0
    batch_size: int = 0
    removed: bool = False
    concurrent: int = 0
    delay: int = 0
    black_list: tuple[str, ...] = ()
    err_times: int = 0
    max_partition_num: int = 0
    read_retry_probability: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionGroup:
    """A partition group; ``leader`` is a broker id from the response's broker list."""

    group_id: int = 0
    leader: int = 0
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterTopic:
    """A FETCH_CLUSTER topic entry; ``None`` policies are sent as a false presence flag."""

    topic: str = ""
    producer_policy: ProducerPolicy | None = None
    consumer_policy: ConsumerPolicy | None = None
    topic_type: TopicType = TopicType.TOPIC
    partition_groups: tuple[PartitionGroup, ...] = ()
    code: int = Code.SUCCESS
    params: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterBroker:
    """A FETCH_CLUSTER broker entry; ``sys_code``/``permission`` travel at version ≥ 2."""

    id: int = 0
    host: str = ""
    port: int = 0
    data_center: str = ""
    nearby: bool = False
    weight: int = 0
    sys_code: int = 0
    permission: int = PERMISSION_READ | PERMISSION_WRITE


def _write_weight(w: Writer, pair: tuple[str, int]) -> None:
    w.write_s2(pair[0])
    w.write_short(pair[1])


def _read_weight(r: Reader) -> tuple[str, int]:
    return r.read_s2(), r.read_short()


def _write_param(w: Writer, pair: tuple[str, str]) -> None:
    w.write_s2(pair[0])
    w.write_s2(pair[1])


def _read_param(r: Reader) -> tuple[str, str]:
    return r.read_s2(), r.read_s2()


def _write_group(w: Writer, group: PartitionGroup) -> None:
    w.write_int(group.group_id)
    w.write_int(group.leader)
    w.write_array(group.partitions, write_short_item)


def _read_group(r: Reader) -> PartitionGroup:
    return PartitionGroup(
        group_id=r.read_int(), leader=r.read_int(), partitions=r.read_array(read_short_item)
    )


def _write_producer_policy(w: Writer, policy: ProducerPolicy) -> None:
    w.write_bool(policy.nearby)
    w.write_bool(policy.single)
    w.write_bool(policy.archive)
    w.write_array(policy.weights, _write_weight)
    w.write_array(policy.black_list, write_s2_item)
    w.write_int(policy.timeout)


def _read_producer_policy(r: Reader) -> ProducerPolicy:
    return ProducerPolicy(
        nearby=r.read_bool(),
        single=r.read_bool(),
        archive=r.read_bool(),
        weights=r.read_array(_read_weight),
        black_list=r.read_array(read_s2_item),
        timeout=r.read_int(),
    )


def _write_consumer_policy(w: Writer, policy: ConsumerPolicy) -> None:
    for flag in (policy.nearby, policy.paused, policy.archive, policy.retry, policy.seq):
        w.write_bool(flag)
    w.write_int(policy.ack_timeout)
    w.write_short(policy.batch_size)
    w.write_bool(policy.removed)
    w.write_int(policy.concurrent)
    w.write_int(policy.delay)
    w.write_array(policy.black_list, write_s2_item)
    w.write_int(policy.err_times)
    w.write_int(policy.max_partition_num)
    w.write_int(policy.read_retry_probability)


def _read_consumer_policy(r: Reader) -> ConsumerPolicy:
    return ConsumerPolicy(
        nearby=r.read_bool(),
        paused=r.read_bool(),
        archive=r.read_bool(),
        retry=r.read_bool(),
        seq=r.read_bool(),
        ack_timeout=r.read_int(),
        batch_size=r.read_short(),
        removed=r.read_bool(),
        concurrent=r.read_int(),
        delay=r.read_int(),
        black_list=r.read_array(read_s2_item),
        err_times=r.read_int(),
        max_partition_num=r.read_int(),
        read_retry_probability=r.read_int(),
    )


def _write_topic(w: Writer, topic: ClusterTopic, version: int) -> None:
    w.write_s2(topic.topic)
    w.write_bool(topic.producer_policy is not None)
    if topic.producer_policy is not None:
        _write_producer_policy(w, topic.producer_policy)
    w.write_bool(topic.consumer_policy is not None)
    if topic.consumer_policy is not None:
        _write_consumer_policy(w, topic.consumer_policy)
    w.write_byte(topic.topic_type)
    w.write_array(topic.partition_groups, _write_group)
    write_code(w, topic.code)
    if version >= TOPIC_PARAMS_VERSION:
        w.write_array(topic.params, _write_param)


def _read_topic(r: Reader, version: int) -> ClusterTopic:
    topic = r.read_s2()
    producer_policy = _read_producer_policy(r) if r.read_bool() else None
    consumer_policy = _read_consumer_policy(r) if r.read_bool() else None
    raw_type = r.read_byte()
    topic_type = _TOPIC_TYPES.get(raw_type)
    if topic_type is None:
        raise DecodeError(f"unknown topic type {raw_type}")
    return ClusterTopic(
        topic=topic,
        producer_policy=producer_policy,
        consumer_policy=consumer_policy,
        topic_type=topic_type,
        partition_groups=r.read_array(_read_group),
        code=read_code(r),
        params=r.read_array(_read_param) if version >= TOPIC_PARAMS_VERSION else (),
    )


def _write_broker(w: Writer, broker: ClusterBroker, version: int) -> None:
    w.write_int(broker.id)
    w.write_s2(broker.host)
    w.write_int(broker.port)
    w.write_s2(broker.data_center)
    w.write_bool(broker.nearby)
    w.write_int(broker.weight)
    if version >= BROKER_FIELDS_VERSION:
        w.write_int(broker.sys_code)
        w.write_int(broker.permission)


def _read_broker(r: Reader, version: int) -> ClusterBroker:
    broker_id, host, port = r.read_int(), r.read_s2(), r.read_int()
    data_center, nearby, weight = r.read_s2(), r.read_bool(), r.read_int()
    if version < BROKER_FIELDS_VERSION:
        return ClusterBroker(
            id=broker_id,
            host=host,
            port=port,
            data_center=data_center,
            nearby=nearby,
            weight=weight,
        )
    return ClusterBroker(
        id=broker_id,
        host=host,
        port=port,
        data_center=data_center,
        nearby=nearby,
        weight=weight,
        sys_code=r.read_int(),
        permission=r.read_int(),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchClusterResponse(Payload):
    """FETCH_CLUSTER response (−10): ``A{topic entry}, A{broker entry}``."""

    TYPE = CommandType.FETCH_CLUSTER_RESPONSE

    topics: tuple[ClusterTopic, ...] = ()
    brokers: tuple[ClusterBroker, ...] = ()

    def write(self, w: Writer, version: int) -> None:
        """Append the fields for header ``version``."""
        w.write_array(self.topics, lambda w_, t: _write_topic(w_, t, version))
        w.write_array(self.brokers, lambda w_, b: _write_broker(w_, b, version))

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields for header ``version``."""
        return cls(
            topics=r.read_array(lambda r_: _read_topic(r_, version)),
            brokers=r.read_array(lambda r_: _read_broker(r_, version)),
        )


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest(TopicListRequest):
    """FIND_COORDINATOR (20): ``A{topic S2}, app S2``."""

    TYPE = CommandType.FIND_COORDINATOR


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerNode:
    """The coordinator broker in a FIND_COORDINATOR entry."""

    id: int = 0
    host: str = ""
    port: int = 0
    data_center: str = ""
    nearby: bool = False
    weight: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorEntry:
    """One topic's coordinator; ``broker`` ``None`` is sent as brokerId −1 (use code 181)."""

    topic: str = ""
    broker: BrokerNode | None = None
    code: int = Code.SUCCESS


def _write_coordinator(w: Writer, entry: CoordinatorEntry) -> None:
    w.write_s2(entry.topic)
    broker = entry.broker
    if broker is None:
        w.write_int(-1)
    else:
        if broker.id == -1:
            raise EncodeError("broker id -1 means 'no coordinator'; use broker=None")
        w.write_int(broker.id)
        w.write_s2(broker.host)
        w.write_int(broker.port)
        w.write_s2(broker.data_center)
        w.write_bool(broker.nearby)
        w.write_int(broker.weight)
    write_code(w, entry.code)


def _read_coordinator(r: Reader) -> CoordinatorEntry:
    topic = r.read_s2()
    broker_id = r.read_int()
    broker = None
    if broker_id != -1:
        broker = BrokerNode(
            id=broker_id,
            host=r.read_s2(),
            port=r.read_int(),
            data_center=r.read_s2(),
            nearby=r.read_bool(),
            weight=r.read_int(),
        )
    return CoordinatorEntry(topic=topic, broker=broker, code=read_code(r))


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinatorResponse(Payload):
    """FIND_COORDINATOR response (−20)."""

    TYPE = CommandType.FIND_COORDINATOR_RESPONSE

    entries: tuple[CoordinatorEntry, ...] = ()

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.entries, _write_coordinator)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(entries=r.read_array(_read_coordinator))


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignmentTopic:
    """A FETCH_ASSIGNED_PARTITION request entry."""

    topic: str = ""
    session_timeout: int = 0
    nearby: bool = False


def _write_assignment_topic(w: Writer, entry: AssignmentTopic) -> None:
    w.write_s2(entry.topic)
    w.write_int(entry.session_timeout)
    w.write_bool(entry.nearby)


def _read_assignment_topic(r: Reader) -> AssignmentTopic:
    return AssignmentTopic(topic=r.read_s2(), session_timeout=r.read_int(), nearby=r.read_bool())


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchAssignedPartitionRequest(Payload):
    """FETCH_ASSIGNED_PARTITION (21): ``A{topic S2, sessionTimeout INT, nearby BOOL}, app S2``."""

    TYPE = CommandType.FETCH_ASSIGNED_PARTITION

    topics: tuple[AssignmentTopic, ...] = ()
    app: str = ""

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_assignment_topic)
        w.write_s2(self.app)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_assignment_topic), app=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignedTopic:
    """A FETCH_ASSIGNED_PARTITION response entry."""

    topic: str = ""
    partitions: tuple[int, ...] = ()
    code: int = Code.SUCCESS


def _write_assigned(w: Writer, entry: AssignedTopic) -> None:
    w.write_s2(entry.topic)
    w.write_array(entry.partitions, write_short_item)
    write_code(w, entry.code)


def _read_assigned(r: Reader) -> AssignedTopic:
    return AssignedTopic(
        topic=r.read_s2(), partitions=r.read_array(read_short_item), code=read_code(r)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchAssignedPartitionResponse(Payload):
    """FETCH_ASSIGNED_PARTITION response (−21)."""

    TYPE = CommandType.FETCH_ASSIGNED_PARTITION_RESPONSE

    topics: tuple[AssignedTopic, ...] = ()

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, _write_assigned)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(_read_assigned))
