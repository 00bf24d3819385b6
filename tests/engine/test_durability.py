"""A Redis restart (AOF, appendfsync always) loses no acknowledged message.

The test starts its own redis-server, produces with qos PERSISTED from several tasks,
SIGKILLs the server mid-stream, restarts it on the same AOF and checks that every
append the engine acknowledged is there with the same bytes, at the same index.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from brokers.engine import Engine, Message, QoS, StoreUnavailable, WriteTimeout
from tests.engine.conftest import snapshot
from tests.scripts_path import RedisServer, free_port


def start_redis(port: int, datadir: Path) -> subprocess.Popen:
    """A redis-server with AOF and ``appendfsync always``; its process."""
    server = RedisServer(datadir, port, appendfsync="always")
    server.start()
    return server.process


def start_replica(port: int, datadir: Path, master_port: int) -> subprocess.Popen:
    """A replica of the server on ``master_port`` (no AOF of its own); its process."""
    server = RedisServer(
        datadir,
        port,
        extra_args=("--replicaof", "127.0.0.1", str(master_port), "--appendonly", "no"),
    )
    server.start()
    return server.process


async def test_sigkill_under_load_loses_no_acknowledged_message():
    datadir = Path(tempfile.mkdtemp(prefix="mqcloud-kill-"))
    port = free_port()
    proc = start_redis(port, datadir)
    acked: list[tuple[int, int, bytes]] = []
    try:
        client = aioredis.from_url(f"redis://127.0.0.1:{port}/0", socket_timeout=2)
        engine = Engine(client, lambda: snapshot(topics={"k": {"partitions": 2}}))
        stop = asyncio.Event()

        async def producer(n: int) -> None:
            seq = 0
            while not stop.is_set():
                body = b"p%d-%d" % (n, seq)
                seq += 1
                try:
                    res = await engine.append(
                        "k", "a", [Message(body)], partition=n % 2, qos=QoS.PERSISTED
                    )
                except (StoreUnavailable, ConnectionError, OSError):
                    return
                except Exception as exc:  # any Redis error after the kill ends this producer
                    if "Connection" in type(exc).__name__ or "Timeout" in type(exc).__name__:
                        return
                    raise
                acked.append((res.partition, res.first_index, body))

        tasks = [asyncio.create_task(producer(n)) for n in range(4)]
        await asyncio.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
        await client.aclose()
        assert len(acked) > 100, len(acked)

        proc = start_redis(port, datadir)
        client = aioredis.from_url(f"redis://127.0.0.1:{port}/0")
        for _ in range(100):  # AOF loading
            try:
                await client.ping()
                break
            except Exception:
                await asyncio.sleep(0.1)
        engine = Engine(client, lambda: snapshot(topics={"k": {"partitions": 2}}))
        for partition in (0, 1):
            want = {i: b for p, i, b in acked if p == partition}
            lo, hi = await engine.bounds("k", partition)
            stored = {
                d.index: d.message.body for d in await engine.read("k", partition, lo, hi - lo)
            }
            missing = [i for i, b in want.items() if stored.get(i) != b]
            assert missing == [], missing[:10]
        await engine.close()
        await client.aclose()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(datadir, ignore_errors=True)


async def test_replicated_qos_waits_for_the_replica():
    """REPLICATED runs WAIT on the writing connection: the replica has the write on return."""
    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-repl-"))
    (workdir / "m").mkdir()
    (workdir / "r").mkdir()
    mport, rport = free_port(), free_port()
    master = start_redis(mport, workdir / "m")
    replica = start_replica(rport, workdir / "r", mport)
    try:
        client = aioredis.from_url(f"redis://127.0.0.1:{mport}/0")
        rclient = aioredis.from_url(f"redis://127.0.0.1:{rport}/0")
        for _ in range(100):
            info = await client.info("replication")
            if info.get("connected_slaves", 0) and "online" in str(info.get("slave0", "")):
                break
            await asyncio.sleep(0.1)
        engine = Engine(client, lambda: snapshot(topics={"k": {"partitions": 1}}))
        for i in range(20):
            res = await engine.append(
                "k", "a", [Message(b"r%d" % i)], partition=0, qos=QoS.REPLICATED
            )
            # WAIT returned: the replica applied the write before the engine answered
            assert await rclient.hget("mq:{t:k:0}:m", "next") == str(res.first_index + 1).encode()
        replica.kill()
        replica.wait()
        engine2 = Engine(
            client, lambda: snapshot(topics={"k": {"partitions": 1}}), durability_timeout_ms=200
        )
        engine2.durability._caps.update(engine.durability._caps)  # still believes in 1 replica
        with pytest.raises(WriteTimeout):
            await engine2.append("k", "a", [Message(b"lost?")], partition=0, qos=QoS.REPLICATED)
        assert (await engine2.bounds("k", 0))[1] == 21  # stored, durability unconfirmed
        await engine.close()
        await engine2.close()
        await client.aclose()
        await rclient.aclose()
    finally:
        for proc in (master, replica):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
