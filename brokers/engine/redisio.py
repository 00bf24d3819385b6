"""Running Lua scripts and durability waits on a single Redis or a Redis Cluster.

:class:`Script` calls EVALSHA (on a single Redis pipelined with the other calls of the
same loop turn, see :mod:`brokers.engine.coalesce`) and falls back to EVAL on NOSCRIPT. :class:`Durability`
implements the qos waits of :mod:`brokers.engine.append`: ``WAIT``/``WAITAOF`` only make
sense on the connection that wrote, so the write and the wait go out as one pipeline on
one connection (on a cluster: the connection of the node owning the key's slot).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Sequence
from time import perf_counter
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.connection import HiredisRespSerializer
from redis.exceptions import NoScriptError, ResponseError
from redis.maint_notifications import MaintNotificationsConfig
from redis.utils import HIREDIS_AVAILABLE

from brokers.engine.coalesce import coalescer
from brokers.engine.errors import WriteTimeout
from brokers.engine.latency import LatencyWindow
from brokers.engine.model import QoS
from brokers.engine.multiplex import send_first

log = logging.getLogger(__name__)
AnyRedis = aioredis.Redis | RedisCluster


def pipelined(client: AnyRedis) -> bool:
    """Whether ``client``'s script calls go on its one pipelined connection, in the order
    made (a single Redis: :mod:`brokers.engine.coalesce`); a cluster's go to each node."""
    return type(client) is aioredis.Redis


def fmt_int(value: int) -> str:
    """Integers as decimal strings (Lua numbers are doubles; never rely on their tostring)."""
    return str(int(value))


LUA_HELPERS = """
local function s(n) return string.format('%d', n) end
local function first_of(id)
  local d = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, d - 1)), tonumber(string.sub(id, d + 1))
end
"""


class HiredisPackedConnection(aioredis.Connection):
    """A TCP connection that packs commands with hiredis (C), as redis-py's synchronous
    client does; the asyncio client packs them in Python, a tenth of a broker's CPU."""

    _packer = HiredisRespSerializer() if HIREDIS_AVAILABLE else None

    def pack_command(self, *args: Any) -> list[bytes]:
        """The command in RESP, as redis-py's own packer would write it."""
        if self._packer is None:
            return super().pack_command(*args)
        return self._packer.pack(*args)


# redis-py 8 enables "maintenance notifications" (a Redis Enterprise feature) by default
# on RESP3 TCP connections, and with them on its pools skip their check of an idle
# connection before handing it out (redis/redis-py#4252): after a Redis restart the next
# command on each idle connection failed with "Connection closed by server". Engine
# clients turn them off, which also saves a CLIENT MAINT_NOTIFICATIONS round trip per
# connection that Redis 7 refuses anyway.
_NO_MAINT = MaintNotificationsConfig(enabled=False)


def engine_client(url: str, **kwargs: Any) -> aioredis.Redis:
    """An asyncio client for an engine outside a broker (proxy, console, tools): redis-py's
    own, with idle pooled connections checked before use (see ``_NO_MAINT``)."""
    return aioredis.from_url(url, maint_notifications_config=_NO_MAINT, **kwargs)


def broker_client(url: str, *, max_connections: int, timeout: float = 10) -> aioredis.Redis:
    """The asyncio client a broker process runs its engine on: a blocking pool (under load
    a request waits for a connection instead of failing) of hiredis-packing connections
    (plain TCP URLs; TLS and unix-socket URLs keep redis-py's own connection classes),
    checked before use when idle (see ``_NO_MAINT``)."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=timeout, maint_notifications_config=_NO_MAINT
    )
    if pool.connection_class is aioredis.Connection:
        pool.connection_class = HiredisPackedConnection
    return aioredis.Redis(connection_pool=pool)


async def command(client: AnyRedis, *args: Any) -> Any:
    """One non-blocking command with its raw reply: on a single Redis pipelined with the
    turn's other calls (:mod:`brokers.engine.coalesce`), skipping redis-py's per-command
    connection round and reply callbacks; on a cluster sent to its slot's node. For hot
    paths only: replies come back as RESP gives them (bytes, lists, None)."""
    if type(client) is aioredis.Redis:
        return await coalescer(client).call(*args)
    return await client.execute_command(*args)


class Script:
    """A Lua script run by SHA: loaded first on every pipelined connection
    (:func:`~brokers.engine.multiplex.send_first`), on demand elsewhere and after a
    ``SCRIPT FLUSH``."""

    def __init__(self, source: str) -> None:
        self.source = LUA_HELPERS + source
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        send_first(self.sha, "SCRIPT", "LOAD", self.source)

    async def __call__(self, client: AnyRedis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if pipelined(client):  # a single Redis: pipelined with the turn's calls
            batch = coalescer(client)
            try:
                return await batch.call("EVALSHA", self.sha, len(keys), *keys, *args)
            except NoScriptError:
                # A Redis that restarted knows no script. Loaded on the same pipelined
                # connection, not by EVAL on a pool connection per caller: a sweep of
                # hundreds of calls at once used up the pool.
                await batch.call("SCRIPT", "LOAD", self.source)
                with contextlib.suppress(NoScriptError):  # unless flushed again meanwhile
                    return await batch.call("EVALSHA", self.sha, len(keys), *keys, *args)
        else:
            with contextlib.suppress(NoScriptError):
                return await client.evalsha(self.sha, len(keys), *keys, *args)
        return await client.eval(self.source, len(keys), *keys, *args)


async def run_pipelined(
    client: AnyRedis, script: Script, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]
) -> list[Any]:
    """Run ``script`` once per ``(keys, args)`` of ``calls`` in ONE pipelined round trip
    (on a Redis Cluster the client splits the pipeline by node) and return the replies in
    order. Calls Redis does not know the script for yet (NOSCRIPT: a fresh server) load it
    and run again in a second round trip; any other error is raised."""
    if not calls:
        return []
    results = await _evalsha_all(client, script, calls)
    missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if missing:
        await client.script_load(script.source)
        again = await _evalsha_all(client, script, [calls[i] for i in missing])
        for i, r in zip(missing, again, strict=True):
            results[i] = r
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


async def _evalsha_all(
    client: AnyRedis, script: Script, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]
) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for keys, args in calls:
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
    return list(await pipe.execute(raise_on_error=False))


class Durability:
    """Waits for AOF fsync (WAITAOF) or replicas (WAIT) after a write, per qos.

    Server capabilities are probed once per node: Redis ≥ 7.2 has WAITAOF. On Redis 7.0
    a PERSISTED write needs no extra wait when the server runs ``appendfsync always``
    (every reply follows the fsync); with ``everysec`` the engine logs once that
    PERSISTED degrades to "written to the AOF file" (survives a Redis crash, not a
    machine crash) — the documented fallback.
    """

    def __init__(self, client: AnyRedis, *, timeout_ms: int = 5_000, replicas: int = 1) -> None:
        self._client = client
        self._timeout_ms = timeout_ms
        self._replicas = replicas
        self._caps: dict[str, dict[str, Any]] = {}
        self._warned = False
        self.latency = LatencyWindow()
        """How long this process's writes took over the last minute (:mod:`.latency`)."""

    @property
    def is_cluster(self) -> bool:
        return isinstance(self._client, RedisCluster)

    def pipelined(self, qos: QoS) -> bool:
        """Whether :meth:`run` at ``qos`` queues its script on the client's pipelined
        connection in the calling turn (a single Redis whose capabilities are known and
        no WAIT/WAITAOF needed): whatever is queued there after it runs after it."""
        if not pipelined(self._client):
            return False
        if qos <= QoS.RECEIVED:
            return True
        caps = self._caps.get("single")
        return caps is not None and self._wait_for(qos, caps) is None

    async def _probe(self, node: ClusterNode | None) -> dict[str, Any]:
        name = node.name if node is not None else "single"
        caps = self._caps.get(name)
        if caps is not None:
            return caps
        if node is not None:
            info = await self._client.info("all", target_nodes=node)  # type: ignore[call-arg]
        else:
            info = await self._client.info("all")
        version = tuple(int(x) for x in str(info.get("redis_version", "0.0")).split(".")[:2])
        caps = {
            # Valkey (a fork of Redis 7.2.4, which reports that as redis_version) has it too
            "waitaof": version >= (7, 2) or "valkey_version" in info,
            "aof": int(info.get("aof_enabled", 0)) == 1,
            "replicas": int(info.get("connected_slaves", 0)),
            "fsync_always": False,
        }
        try:
            if node is not None:
                cfg = await self._client.config_get("appendfsync", target_nodes=node)  # type: ignore[call-arg]
            else:
                cfg = await self._client.config_get("appendfsync")
            caps["fsync_always"] = cfg.get("appendfsync") == "always"
        except ResponseError:  # CONFIG may be renamed away on managed servers
            pass
        self._caps[name] = caps
        return caps

    def _wait_for(self, qos: QoS, caps: dict[str, Any]) -> tuple[Any, ...] | None:
        """The command that waits for ``qos`` after a write on a server with ``caps``."""
        if qos is QoS.REPLICATED and caps["replicas"] > 0:
            return ("WAIT", min(self._replicas, caps["replicas"]), self._timeout_ms)
        if qos in (QoS.PERSISTED, QoS.REPLICATED) and caps["waitaof"] and caps["aof"]:
            return ("WAITAOF", 1, 0, self._timeout_ms)
        return None

    def _wait_command(self, qos: QoS, caps: dict[str, Any]) -> tuple[Any, ...] | None:
        wait = self._wait_for(qos, caps)
        degraded = wait is None and qos in (QoS.PERSISTED, QoS.REPLICATED)
        if degraded and not (caps["aof"] and caps["fsync_always"]) and not self._warned:
            self._warned = True
            log.warning(
                "Redis lacks WAITAOF and appendfsync always: PERSISTED means written to "
                "the AOF file (aof=%s), not fsynced",
                caps["aof"],
            )
        return wait

    async def run(self, script: Script, keys: Sequence[str], args: Sequence[Any], qos: QoS) -> Any:
        """Run ``script`` and wait for the durability ``qos`` asks for; how long it took
        (failed or not) counts in :attr:`latency` (no coroutine more per write)."""
        started = perf_counter()
        try:
            if qos <= QoS.RECEIVED:
                return await script(self._client, keys, args)
            node = self._client.get_node_from_key(keys[0]) if self.is_cluster else None  # type: ignore[union-attr]
            wait = self._wait_command(qos, await self._probe(node))
            if wait is None:
                return await script(self._client, keys, args)
            for _attempt in range(2):
                result, acked = await self._pipeline(node, script, keys, args, wait)
                if isinstance(result, NoScriptError):
                    if node is not None:
                        await self._client.script_load(script.source, target_nodes=node)  # type: ignore[call-arg]
                    else:
                        await self._client.script_load(script.source)
                    continue
                if isinstance(result, Exception):
                    raise result
                if isinstance(acked, Exception):
                    raise acked
                if wait[0] == "WAITAOF":
                    if int(acked[0]) < 1:
                        raise WriteTimeout("AOF fsync not confirmed in time")
                elif int(acked) < wait[1]:
                    raise WriteTimeout(f"{acked} of {wait[1]} replicas confirmed in time")
                return result
            raise WriteTimeout("script could not be loaded")  # pragma: no cover
        finally:
            ended = perf_counter()
            self.latency.add(ended - started, ended)

    async def _pipeline(
        self,
        node: ClusterNode | None,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        wait: tuple[Any, ...],
    ) -> tuple[Any, Any]:
        evalsha = ("EVALSHA", script.sha, len(keys), *keys, *args)
        if node is None:
            pipe = self._client.pipeline(transaction=False)
            pipe.execute_command(*evalsha)
            pipe.execute_command(*wait)
            result, acked = await pipe.execute(raise_on_error=False)
            return result, acked
        commands = [PipelineCommand(0, *evalsha), PipelineCommand(1, *wait)]
        await node.execute_pipeline(commands)
        return commands[0].result, commands[1].result
