"""FanOutWithAck copies are durable per subscriber identity (``<app>#<clientId>``): a
subscriber that disconnects and comes back — to another broker process — gets every
unacked copy, and a broker killed with SIGKILL and restarted loses nothing (§7, §9.1)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from brokers.clients.vibemq import ConnectionClosed, VibeMQClient, VibeMQServerError
from brokers.models import Broker as BrokerRow
from tests.recovery.processes import kill_tree
from tests.scripts_path import wait_for_port
from tests.vibemq.test_delivery import nothing_more

ROOT = Path(__file__).resolve().parents[2]


async def closed_on(broker, *, connections: int) -> None:
    """Wait until ``broker`` has seen a client leave and finished its clean-up (the client's
    close returns before the broker reads it; a publish racing it could still count the
    subscriber as present)."""
    for _ in range(500):
        if broker.server.connections == connections and not broker.server.hub._background:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the broker did not finish closing the connection")


async def test_reconnect_to_another_broker_gets_unacked_copies(broker, broker2, catalog):
    pub = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
    sub = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token, client_id="s1")
    other = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
    try:
        await pub.create_queue("feed", deliveryMode="FanOutWithAck")
        await broker2.watcher.refresh()
        await sub.subscribe("feed")
        await other.subscribe("feed")
        for i in range(3):
            await pub.publish("feed", i, message_id=f"f{i}")
        got = [await sub.receive() for _ in range(3)]
        assert [m.id for m in got] == ["f0", "f1", "f2"]
        sub.ack("f0")
        await sub.ping()  # the ack was read before the disconnect
        await sub.close()  # f1, f2 unacked: kept for s1, not a failed attempt
        await closed_on(broker, connections=2)
        await pub.publish("feed", "later", message_id="f3")  # s1 is not present: not its
        assert [m.id for m in [await other.receive() for _ in range(4)]] == [
            "f0",
            "f1",
            "f2",
            "f3",
        ]

        back = await VibeMQClient.open("127.0.0.1", broker2.port, catalog.token, client_id="s1")
        try:
            await back.subscribe("feed")
            again = [await back.receive() for _ in range(2)]
            assert [(m.id, m.payload, m.attempts) for m in again] == [
                ("f1", 1, 2),
                ("f2", 2, 2),
            ]
            for m in again:
                back.ack(m.id)
            await back.ping()
            assert await nothing_more(back)
            # a dropped connection (no disconnect frame) returns its copies just the same
            # (§7: a closed connection is not a failed attempt)
            await pub.publish("feed", "x", message_id="f4")
            assert (await back.receive()).id == "f4"
            back.abort()
        finally:
            await back.close()
        again = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token, client_id="s1")
        try:
            await again.subscribe("feed")
            m = await again.receive(5)
            assert (m.id, m.attempts) == ("f4", 2)
            again.ack(m.id)
        finally:
            await again.close()
        # a connection without clientId keeps nothing after it goes: its member progress
        # is deleted with it, while the durable member's waits for it (with a TTL)
        await other.close()
        await closed_on(broker, connections=1)
        redis = broker.engine.redis
        assert await redis.keys("mq:{t:feed:0}:*app1#~*") == []
        assert await redis.pttl("mq:{t:feed:0}:c:app1#s1") > 0
    finally:
        await pub.close()
        await sub.close()
        await other.close()


async def test_client_id_is_validated(raw):
    r = await raw()
    r.send({"id": "c", "type": "connect", "headers": {"clientId": "bad id|x"}})
    err = await r.recv()
    assert (err["id"], err["errorCode"]) == ("c", "INVALID_MESSAGE")
    assert "clientId" in err["errorMessage"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_broker(log: Path) -> subprocess.Popen:
    """``runbroker`` for broker 1; its output is appended to ``log`` (shown on failure)."""
    db = django_settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}"
        f"/{db['NAME']}",
        "BROKER_HEARTBEAT_SECONDS": "0.5",
        "VIBEMQ_ACK_TIMEOUT_MS": "500",
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "runbroker", "--broker-id", "1", "--bind", "127.0.0.1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


async def _open_when_back(port: int, token: str, client_id: str) -> VibeMQClient:
    """Connect as a client does after its broker restarted: a connection refused or
    dropped while the new process comes up is tried again, for up to 15 s."""
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        try:
            return await VibeMQClient.open("127.0.0.1", port, token, client_id=client_id)
        except (ConnectionClosed, OSError):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


@pytest.mark.timeout(90)
def test_sigkilled_broker_loses_no_copy(catalog, tmp_path):
    port = _free_port()
    BrokerRow.objects.filter(id=1).update(
        jmq4_port=_free_port(), zbus_port=_free_port(), vibemq_port=port
    )
    log = tmp_path / "runbroker.log"
    procs = [_start_broker(log)]
    try:
        asyncio.run(_kill_and_restart(procs, port, catalog.token, log))
    except BaseException:
        sys.stderr.write(f"--- the brokers' output ---\n{log.read_text(errors='replace')}")
        raise
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


async def _kill_and_restart(
    procs: list[subprocess.Popen], port: int, token: str, log: Path
) -> None:
    await asyncio.to_thread(wait_for_port, port, timeout=30)
    pub = await VibeMQClient.open("127.0.0.1", port, token)
    sub = await VibeMQClient.open("127.0.0.1", port, token, client_id="k1")
    await pub.create_queue("dur", deliveryMode="FanOutWithAck")
    await sub.subscribe("dur")
    for i in range(3):
        await pub.publish("dur", i, message_id=f"d{i}")
    got = [await sub.receive() for _ in range(3)]
    sub.ack(got[0].id)
    await sub.ping()
    kill_tree(procs[0])  # its worker too: none stops gracefully and keeps the port
    for c in (pub, sub):
        await asyncio.wait_for(c.closed.wait(), 5)
        await c.close()

    procs.append(_start_broker(log))
    await asyncio.to_thread(wait_for_port, port, timeout=30)
    back = await _open_when_back(port, token, "k1")
    try:
        await back.subscribe("dur")
        # in flight when the broker died: a failed attempt, retried after the backoff
        again = [await back.receive(10) for _ in range(2)]
        assert [(m.id, m.attempts) for m in again] == [("d1", 2), ("d2", 2)]
        for m in again:
            back.ack(m.id)
        await back.ping()
        assert await nothing_more(back)
        with pytest.raises(VibeMQServerError):
            await back.create_queue("dur")  # the queue itself survived as well
    finally:
        await back.close()
