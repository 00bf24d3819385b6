"""FIND_COORDINATOR and FETCH_ASSIGNED_PARTITION (spec §5.4, §6.6)."""

from __future__ import annotations

from brokers.protocols.jmq4 import (
    AssignedTopic,
    BrokerNode,
    Code,
    CommandType,
    CoordinatorEntry,
    FetchAssignedPartitionRequest,
    FetchAssignedPartitionResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    Frame,
    Header,
    response_frame,
    validate_name,
)
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.coordinator import coordinator_for
from brokers.servers.jmq4.errors import Reject
from brokers.servers.jmq4.session import Session


async def find_coordinator(
    ctx: ServerContext, session: Session, header: Header, req: FindCoordinatorRequest
) -> Frame:
    """Every topic gets the app's coordinator, or brokerId −1 with code 181; a topic whose
    name breaks §8.5 gets brokerId −1 with code 6."""
    snapshot = ctx.snapshot
    session.authorize(req.app, snapshot)
    broker = coordinator_for(snapshot, req.app)
    node = None
    if broker is not None:
        node = BrokerNode(
            id=broker.id,
            host=broker.host,
            port=broker.jmq4_port,
            data_center=broker.data_center,
            weight=broker.weight,
        )
    code = Code.SUCCESS if node else Code.FW_COORDINATOR_NOT_AVAILABLE
    entries = tuple(
        CoordinatorEntry(topic=t, broker=None, code=Code.CN_PARAM_ERROR)
        if validate_name(t) is not None  # §8.5: no such topic can exist
        else CoordinatorEntry(topic=t, broker=node, code=code)
        for t in req.topics
    )
    return response_frame(header, FindCoordinatorResponse(entries=entries))


async def fetch_assigned_partition(
    ctx: ServerContext, session: Session, header: Header, req: FetchAssignedPartitionRequest
) -> Frame:
    """Assign partition groups to the client's IP; only the coordinator may answer (181)."""
    snapshot = ctx.snapshot
    session.authorize(req.app, snapshot)
    coordinator = coordinator_for(snapshot, req.app)
    if coordinator is None or coordinator.id != ctx.broker_id:
        raise Reject(Code.FW_COORDINATOR_NOT_AVAILABLE, "this broker is not the coordinator")
    now = ctx.engine.now_ms()
    results = []
    for entry in req.topics:
        if validate_name(entry.topic) is not None:
            results.append(AssignedTopic(topic=entry.topic, code=Code.CN_PARAM_ERROR))
            continue
        topic = snapshot.topics.get(entry.topic)
        if topic is None:
            results.append(AssignedTopic(topic=entry.topic, code=Code.FW_TOPIC_NOT_EXIST))
            continue
        groups = list(topic.groups)
        if entry.nearby:
            groups = [
                g
                for g in groups
                if (b := snapshot.brokers.get(g.leader)) is not None
                and b.data_center == session.region
            ]
        assigned = await ctx.engine.assign_groups(
            entry.topic,
            req.app,
            session.peer_host,
            [g.group_id for g in groups],
            session_timeout_ms=entry.session_timeout,
            now_ms=now,
        )
        partitions = tuple(
            sorted(p for g in groups if g.group_id in assigned for p in g.partitions)
        )
        code = Code.SUCCESS if partitions else Code.FW_COORDINATOR_PARTITION_ASSIGNOR_NO_PARTITIONS
        results.append(AssignedTopic(topic=entry.topic, partitions=partitions, code=code))
    return response_frame(header, FetchAssignedPartitionResponse(topics=tuple(results)))


HANDLERS = {
    CommandType.FIND_COORDINATOR: find_coordinator,
    CommandType.FETCH_ASSIGNED_PARTITION: fetch_assigned_partition,
}
