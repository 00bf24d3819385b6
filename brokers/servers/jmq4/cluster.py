"""FETCH_CLUSTER (spec §5.3): topic metadata, policies and brokers from the catalog snapshot."""

from __future__ import annotations

from brokers.engine import (
    BrokerInfo,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    ProducerPolicyInfo,
    TopicInfo,
)
from brokers.protocols.jmq4 import (
    ClusterBroker,
    ClusterTopic,
    CommandType,
    ConsumerPolicy,
    FetchClusterRequest,
    FetchClusterResponse,
    Frame,
    Header,
    PartitionGroup,
    ProducerPolicy,
    TopicType,
    missing_topic_code,
    response_frame,
)
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.session import Session

_SHORT_MAX = 32767
_INT_MAX = 2**31 - 1


def _clamp(value: int, high: int = _INT_MAX) -> int:
    return max(0, min(int(value), high))


def producer_policy(policy: ProducerPolicyInfo) -> ProducerPolicy:
    """The wire form of a producer policy."""
    return ProducerPolicy(
        nearby=policy.nearby,
        single=policy.single,
        archive=policy.archive,
        weights=tuple((str(b), _clamp(w, _SHORT_MAX)) for b, w in sorted(policy.weights.items())),
        black_list=tuple(policy.blacklist),
        timeout=_clamp(policy.timeout_ms),
    )


def consumer_policy(policy: ConsumerPolicyInfo) -> ConsumerPolicy:
    """The wire form of a consumer policy (``removed`` is always false)."""
    return ConsumerPolicy(
        nearby=policy.nearby,
        paused=policy.paused,
        archive=policy.archive,
        retry=policy.retry,
        seq=policy.sequential,
        ack_timeout=_clamp(policy.ack_timeout_ms),
        batch_size=_clamp(policy.batch_size, _SHORT_MAX),
        concurrent=_clamp(policy.concurrent),
        delay=_clamp(policy.delay_ms),
        black_list=tuple(policy.blacklist),
        err_times=_clamp(policy.err_times),
        max_partition_num=_clamp(policy.max_partition_num),
        read_retry_probability=_clamp(policy.read_retry_probability),
    )


def partition_groups(topic: TopicInfo, broker_id: int) -> tuple[PartitionGroup, ...]:
    """The topic's groups; a topic without groups is one group led by this broker."""
    if not topic.groups:
        return (
            PartitionGroup(group_id=0, leader=broker_id, partitions=tuple(range(topic.partitions))),
        )
    return tuple(
        PartitionGroup(group_id=g.group_id, leader=g.leader, partitions=tuple(g.partitions))
        for g in topic.groups
    )


def topic_entry(snapshot: CatalogSnapshot, code: str, app: str, broker_id: int) -> ClusterTopic:
    """One topic entry; an unknown topic gets code 189 and nothing else (6 for a name no
    topic can have, §8.5)."""
    topic = snapshot.topics.get(code)
    if topic is None:
        return ClusterTopic(topic=code, code=missing_topic_code(code))
    producer = snapshot.producer(code, app)
    consumer = snapshot.consumer(code, app)
    broadcast = topic.type == "broadcast" or (consumer is not None and consumer.broadcast)
    return ClusterTopic(
        topic=code,
        producer_policy=producer_policy(producer) if producer else None,
        consumer_policy=consumer_policy(consumer) if consumer else None,
        topic_type=TopicType.BROADCAST if broadcast else TopicType.TOPIC,
        partition_groups=partition_groups(topic, broker_id),
        params=(("type", topic.type),),
    )


def broker_entry(broker: BrokerInfo) -> ClusterBroker:
    """A broker entry; a broker that is down has no permission."""
    return ClusterBroker(
        id=broker.id,
        host=broker.host,
        port=broker.jmq4_port,
        data_center=broker.data_center,
        weight=broker.weight,
        permission=broker.permission if broker.alive else 0,
    )


def preferred_up(snapshot: CatalogSnapshot, codes: tuple[str, ...]) -> set[int]:
    """The preferred leaders of the topics' groups that are up."""
    found: set[int] = set()
    for code in codes:
        topic = snapshot.topics.get(code)
        for g in topic.groups if topic is not None else ():
            broker = snapshot.brokers.get(g.preferred_leader or 0)
            if broker is not None and broker.alive:
                found.add(broker.id)
    return found


async def fetch_cluster(
    ctx: ServerContext, session: Session, header: Header, req: FetchClusterRequest
) -> Frame:
    """Answer from the catalog snapshot; the brokers listed are those leading the requested
    topics' groups and those that should lead them and are up (a broker back from a failure
    is listed again before the preferred-leader rebalance gives it its groups back)."""
    snapshot = ctx.snapshot
    session.authorize(req.app, snapshot)
    topics = tuple(topic_entry(snapshot, t, req.app, ctx.broker_id) for t in req.topics)
    listed = {g.leader for t in topics for g in t.partition_groups} | preferred_up(
        snapshot, req.topics
    )
    brokers = tuple(
        broker_entry(snapshot.brokers[b]) for b in sorted(listed) if b in snapshot.brokers
    )
    return response_frame(header, FetchClusterResponse(topics=topics, brokers=brokers))


HANDLERS = {CommandType.FETCH_CLUSTER: fetch_cluster}
