"""Hypothesis strategies producing valid JMQ4 values, headers and frames for every command."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from hypothesis import strategies as st

from brokers.protocols import jmq4
from brokers.protocols.jmq4 import cluster, consume

Strategy = st.SearchStrategy

bytes_ = st.integers(-(2**7), 2**7 - 1)
shorts = st.integers(-(2**15), 2**15 - 1)
ints = st.integers(-(2**31), 2**31 - 1)
longs = st.integers(-(2**63), 2**63 - 1)
bools = st.booleans()
s1 = st.text(max_size=31)  # at most 4 bytes per character: always ≤ 127 bytes
s2 = st.text(max_size=40)
codes = st.sampled_from(list(jmq4.Code))
versions = st.integers(jmq4.header.MIN_VERSION, jmq4.header.MAX_VERSION)


def tuples(elements: Strategy, max_size: int = 3) -> Strategy:
    """Small tuples of ``elements``."""
    return st.lists(elements, max_size=max_size).map(tuple)


attribute_maps = st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4)

messages: Strategy = st.builds(
    jmq4.BrokerMessage,
    partition=shorts,
    index=longs,
    term=ints,
    magic=shorts,
    sys_code=shorts,
    priority=bytes_,
    client_ip=st.binary(min_size=16, max_size=16),
    send_time=longs,
    store_time=ints,
    body_crc=longs,
    flag=shorts,
    body=st.binary(max_size=40),
    business_id=s1,
    attributes=attribute_maps.map(jmq4.encode_attributes),
    extension=st.binary(max_size=8),
    app=s1,
).map(lambda m: replace(m, size=m.encoded_size))

batch_items: Strategy = st.builds(
    jmq4.BatchItem,
    priority=bytes_,
    flag=shorts,
    body=st.binary(max_size=20),
    business_id=s1,
    attributes=attribute_maps.map(jmq4.encode_attributes),
)

_producer_policies = st.builds(
    cluster.ProducerPolicy,
    nearby=bools,
    single=bools,
    archive=bools,
    weights=tuples(st.tuples(s2, shorts)),
    black_list=tuples(s2),
    timeout=ints,
)
_consumer_policies = st.builds(
    cluster.ConsumerPolicy,
    nearby=bools,
    paused=bools,
    archive=bools,
    retry=bools,
    seq=bools,
    ack_timeout=ints,
    batch_size=shorts,
    removed=bools,
    concurrent=ints,
    delay=ints,
    black_list=tuples(s2),
    err_times=ints,
    max_partition_num=ints,
    read_retry_probability=ints,
)


def _cluster_response(version: int) -> Strategy:
    topics = st.builds(
        cluster.ClusterTopic,
        topic=s2,
        producer_policy=st.none() | _producer_policies,
        consumer_policy=st.none() | _consumer_policies,
        topic_type=st.sampled_from(list(jmq4.TopicType)),
        partition_groups=tuples(
            st.builds(cluster.PartitionGroup, group_id=ints, leader=ints, partitions=tuples(shorts))
        ),
        code=codes,
        params=tuples(st.tuples(s2, s2)) if version >= 4 else st.just(()),
    )
    extra = (
        {"sys_code": ints, "permission": ints}
        if version >= 2
        else {"sys_code": st.just(0), "permission": st.just(3)}
    )
    brokers = st.builds(
        cluster.ClusterBroker,
        id=ints,
        host=s2,
        port=ints,
        data_center=s2,
        nearby=bools,
        weight=ints,
        **extra,
    )
    return st.builds(jmq4.FetchClusterResponse, topics=tuples(topics), brokers=tuples(brokers))


def _fetch_index_response(version: int) -> Strategy:
    ranges = (
        {"left_index": longs, "right_index": longs}
        if version >= 3
        else {"left_index": st.just(0), "right_index": st.just(0)}
    )
    partitions = st.builds(
        consume.PartitionIndexResult, partition=shorts, index=longs, code=codes, **ranges
    )
    topics = st.builds(consume.IndexResultTopic, topic=s2, partitions=tuples(partitions))
    return st.builds(jmq4.FetchIndexResponse, topics=tuples(topics))


_topic_list = {"topics": tuples(s2), "app": s2}
_registration = st.builds(jmq4.RegisteredTopic, topic=s2, id=s2)
_partition_codes = tuples(
    st.builds(
        jmq4.TopicPartitionCodes,
        topic=s2,
        partitions=tuples(st.builds(jmq4.PartitionCode, partition=shorts, code=codes)),
    )
)
_brokers = st.builds(
    jmq4.BrokerNode,
    id=ints.filter(lambda i: i != -1),
    host=s2,
    port=ints,
    data_center=s2,
    nearby=bools,
    weight=ints,
)


def _fixed(strategy: Strategy) -> Callable[[int], Strategy]:
    return lambda _version: strategy


PAYLOADS: dict[type[jmq4.Payload], Callable[[int], Strategy]] = {
    jmq4.AddConnectionRequest: _fixed(
        st.builds(
            jmq4.AddConnectionRequest,
            username=s1,
            password=s1,
            app=s1,
            token=s1,
            region=s1,
            namespace=s1,
            language=st.sampled_from(list(jmq4.Language)),
            version=s1,
            ip=s1,
            time=longs,
            sequence=longs,
        )
    ),
    jmq4.AddConnectionResponse: _fixed(
        st.builds(jmq4.AddConnectionResponse, connection_id=s1, notification=s2)
    ),
    jmq4.RemoveConnectionRequest: _fixed(st.just(jmq4.RemoveConnectionRequest())),
    jmq4.HeartbeatRequest: _fixed(st.just(jmq4.HeartbeatRequest())),
    jmq4.FetchHealthRequest: _fixed(st.just(jmq4.FetchHealthRequest())),
    jmq4.FetchHealthResponse: _fixed(
        st.builds(jmq4.FetchHealthResponse, point=st.floats(allow_nan=False))
    ),
    jmq4.BooleanAck: _fixed(st.just(jmq4.BooleanAck())),
    jmq4.AddConsumerRequest: _fixed(
        st.builds(jmq4.AddConsumerRequest, sequence=longs, **_topic_list)
    ),
    jmq4.AddConsumerResponse: _fixed(
        st.builds(jmq4.AddConsumerResponse, entries=tuples(_registration))
    ),
    jmq4.RemoveConsumerRequest: _fixed(st.builds(jmq4.RemoveConsumerRequest, **_topic_list)),
    jmq4.AddProducerRequest: _fixed(
        st.builds(jmq4.AddProducerRequest, sequence=longs, **_topic_list)
    ),
    jmq4.AddProducerResponse: _fixed(
        st.builds(jmq4.AddProducerResponse, entries=tuples(_registration))
    ),
    jmq4.RemoveProducerRequest: _fixed(st.builds(jmq4.RemoveProducerRequest, **_topic_list)),
    jmq4.FetchClusterRequest: _fixed(st.builds(jmq4.FetchClusterRequest, **_topic_list)),
    jmq4.FetchClusterResponse: _cluster_response,
    jmq4.FindCoordinatorRequest: _fixed(st.builds(jmq4.FindCoordinatorRequest, **_topic_list)),
    jmq4.FindCoordinatorResponse: _fixed(
        st.builds(
            jmq4.FindCoordinatorResponse,
            entries=tuples(
                st.builds(jmq4.CoordinatorEntry, topic=s2, broker=st.none() | _brokers, code=codes)
            ),
        )
    ),
    jmq4.FetchAssignedPartitionRequest: _fixed(
        st.builds(
            jmq4.FetchAssignedPartitionRequest,
            topics=tuples(
                st.builds(jmq4.AssignmentTopic, topic=s2, session_timeout=ints, nearby=bools)
            ),
            app=s2,
        )
    ),
    jmq4.FetchAssignedPartitionResponse: _fixed(
        st.builds(
            jmq4.FetchAssignedPartitionResponse,
            topics=tuples(
                st.builds(jmq4.AssignedTopic, topic=s2, partitions=tuples(shorts), code=codes)
            ),
        )
    ),
    jmq4.FetchTopicMessageRequest: _fixed(
        st.builds(
            jmq4.FetchTopicMessageRequest,
            topics=tuples(st.builds(jmq4.TopicFetch, topic=s2, count=shorts)),
            app=s2,
            ack_timeout=ints,
            long_poll_timeout=ints,
        )
    ),
    jmq4.FetchTopicMessageResponse: _fixed(
        st.builds(
            jmq4.FetchTopicMessageResponse,
            topics=tuples(
                st.builds(jmq4.TopicMessages, topic=s2, messages=tuples(messages, 2), code=codes)
            ),
        )
    ),
    jmq4.FetchPartitionMessageRequest: _fixed(
        st.builds(
            jmq4.FetchPartitionMessageRequest,
            topics=tuples(
                st.builds(
                    jmq4.PartitionFetchTopic,
                    topic=s2,
                    partitions=tuples(
                        st.builds(jmq4.PartitionFetch, partition=shorts, count=ints, index=longs)
                    ),
                )
            ),
            app=s2,
        )
    ),
    jmq4.FetchPartitionMessageResponse: _fixed(
        st.builds(
            jmq4.FetchPartitionMessageResponse,
            topics=tuples(
                st.builds(
                    jmq4.PartitionMessagesTopic,
                    topic=s2,
                    partitions=tuples(
                        st.builds(
                            jmq4.PartitionMessages,
                            partition=shorts,
                            messages=tuples(messages, 2),
                            code=codes,
                        )
                    ),
                )
            ),
        )
    ),
    jmq4.CommitAckRequest: _fixed(
        st.builds(
            jmq4.CommitAckRequest,
            topics=tuples(
                st.builds(
                    jmq4.AckTopic,
                    topic=s2,
                    partitions=tuples(
                        st.builds(
                            jmq4.AckPartition,
                            partition=shorts,
                            acks=tuples(
                                st.builds(
                                    jmq4.AckEntry,
                                    partition=shorts,
                                    index=longs,
                                    retry_type=st.sampled_from(list(jmq4.RetryType)),
                                )
                            ),
                        )
                    ),
                )
            ),
            app=s2,
        )
    ),
    jmq4.CommitAckResponse: _fixed(st.builds(jmq4.CommitAckResponse, topics=_partition_codes)),
    jmq4.CommitAckIndexRequest: _fixed(
        st.builds(
            jmq4.CommitAckIndexRequest,
            topics=tuples(
                st.builds(
                    jmq4.AckIndexTopic,
                    topic=s2,
                    partitions=tuples(
                        st.builds(jmq4.PartitionIndex, partition=shorts, index=longs)
                    ),
                )
            ),
            app=s2,
        )
    ),
    jmq4.CommitAckIndexResponse: _fixed(
        st.builds(jmq4.CommitAckIndexResponse, topics=_partition_codes)
    ),
    jmq4.FetchIndexRequest: _fixed(
        st.builds(
            jmq4.FetchIndexRequest,
            topics=tuples(st.builds(jmq4.IndexTopic, topic=s2, partitions=tuples(shorts))),
            app=s2,
        )
    ),
    jmq4.FetchIndexResponse: _fetch_index_response,
    jmq4.ProduceMessageRequest: _fixed(
        st.builds(
            jmq4.ProduceMessageRequest,
            topics=tuples(
                st.builds(
                    jmq4.ProduceTopic,
                    topic=s2,
                    tx_id=s2,
                    timeout=ints,
                    qos_level=bytes_,
                    messages=tuples(messages, 2),
                )
            ),
            app=s2,
        )
    ),
    jmq4.ProduceMessageResponse: _fixed(
        st.builds(
            jmq4.ProduceMessageResponse,
            topics=tuples(
                st.builds(
                    jmq4.ProduceTopicResult,
                    topic=s2,
                    code=codes,
                    items=tuples(
                        st.builds(
                            jmq4.ProducedItem, partition=shorts, index=longs, start_time=longs
                        )
                    ),
                )
            ),
        )
    ),
    jmq4.PrepareRequest: _fixed(
        st.builds(
            jmq4.PrepareRequest,
            topic=s2,
            app=s2,
            sequence=longs,
            transaction_id=s2,
            timeout=ints,
        )
    ),
    jmq4.PrepareResponse: _fixed(st.builds(jmq4.PrepareResponse, tx_id=s2, code=codes)),
    jmq4.CommitRequest: _fixed(st.builds(jmq4.CommitRequest, topic=s2, app=s2, tx_id=s2)),
    jmq4.CommitResponse: _fixed(st.builds(jmq4.CommitResponse, code=codes)),
    jmq4.RollbackRequest: _fixed(st.builds(jmq4.RollbackRequest, topic=s2, app=s2, tx_id=s2)),
    jmq4.RollbackResponse: _fixed(st.builds(jmq4.RollbackResponse, code=codes)),
    jmq4.FetchProduceFeedbackRequest: _fixed(
        st.builds(
            jmq4.FetchProduceFeedbackRequest,
            app=s2,
            topic=s2,
            status=bytes_,
            long_poll_timeout=ints,
        )
    ),
    jmq4.FetchProduceFeedbackResponse: _fixed(
        st.builds(
            jmq4.FetchProduceFeedbackResponse,
            entries=tuples(st.builds(jmq4.FeedbackEntry, topic=s2, tx_id=s2, transaction_id=s2)),
            code=codes,
        )
    ),
}

header_statuses = st.sampled_from([code for code in jmq4.Code if code <= 255])


@st.composite
def frames(draw: st.DrawFn, payload_type: type[jmq4.Payload] | None = None) -> jmq4.Frame:
    """A valid frame of ``payload_type`` (any registered type if ``None``)."""
    if payload_type is None:
        payload_type = draw(st.sampled_from(sorted(PAYLOADS, key=lambda cls: cls.TYPE)))
    version = draw(versions)
    payload = draw(PAYLOADS[payload_type](version))
    response = not payload_type.TYPE.is_request
    header = jmq4.Header(
        version=version,
        direction=jmq4.Direction.RESPONSE if response else jmq4.Direction.REQUEST,
        qos=draw(st.sampled_from(list(jmq4.QosLevel)[:4])),
        request_id=draw(ints),
        type=payload_type.TYPE,
        send_time=draw(longs),
        status=draw(header_statuses) if response else 0,
        error=draw(s2) if response else "",
    )
    return jmq4.Frame(header, payload)
