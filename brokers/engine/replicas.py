"""How far each replica of the store is behind its master, in bytes of the replication
stream: what the replica-lag alert reads (the reference console's "replica falling
behind"). A produce at QoS REPLICATED waits for a replica; one far behind is what a
failover would lose.

On a single Redis the master is the engine's server; on Redis Cluster every master node
is asked. ``INFO replication`` gives the master's offset and each replica's; a replica
that is connected but has not acknowledged the stream for a while shows as its last
offset, so its lag grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import RedisCluster

from brokers.engine.redisio import AnyRedis


@dataclass(frozen=True, slots=True)
class ReplicaLag:
    """One replica of one master: ``lag_bytes`` behind, in replication ``state``."""

    master: str
    replica: str
    state: str
    lag_bytes: int


def lags_of(master: str, info: dict[str, Any]) -> list[ReplicaLag]:
    """The replicas ``INFO replication`` of ``master`` lists (none unless it is a master)."""
    if info.get("role") != "master":
        return []
    offset = int(info.get("master_repl_offset", 0))
    out = []
    for i in range(int(info.get("connected_slaves", 0))):
        slave = info.get(f"slave{i}")
        if not isinstance(slave, dict):
            continue
        address = f"{slave.get('ip', '?')}:{slave.get('port', '?')}"
        lag = max(0, offset - int(slave.get("offset", 0)))
        out.append(ReplicaLag(master, address, str(slave.get("state", "?")), lag))
    return out


async def replica_lags(client: AnyRedis) -> list[ReplicaLag]:
    """Every replica of the store's masters, with its lag."""
    if isinstance(client, RedisCluster):
        out: list[ReplicaLag] = []
        for node in client.get_primaries():
            info = await client.info("replication", target_nodes=node)  # type: ignore[call-arg]
            out += lags_of(node.name, info)
        return out
    kwargs = client.connection_pool.connection_kwargs
    name = f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return lags_of(name, await client.info("replication"))
