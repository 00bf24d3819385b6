"""Replica-lag alerts: a store replica that stops acknowledging the replication stream
(frozen with SIGSTOP) while the master takes writes alerts the platform admins once it is
more than ``REPLICA_LAG_ALERT_BYTES`` behind, once per throttle window; a replica in step
does not; the limit at 0 turns the check off."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import redis

from brokers.engine.replicas import ReplicaLag, lags_of
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.replicas import check_replica_lag
from tests import factories
from tests.scripts_path import RedisServer, free_port

pytestmark = pytest.mark.django_db


def _replicas(url: str) -> list[dict]:
    info = redis.Redis.from_url(url).info("replication")
    return [info[f"slave{i}"] for i in range(int(info.get("connected_slaves", 0)))]


@pytest.fixture
def replicated(tmp_path) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A master and its replica, both of this test's own, the replica online."""
    master = RedisServer(tmp_path / "master", free_port())
    master.start()
    replica = RedisServer(
        tmp_path / "replica", free_port(), extra_args=("--replicaof", "127.0.0.1", str(master.port))
    )
    replica.start()
    try:
        deadline = time.monotonic() + 30
        while not [r for r in _replicas(master.url) if r.get("state") == "online"]:
            assert time.monotonic() < deadline, "the replica never came online"
            time.sleep(0.1)
        yield master, replica
    finally:
        if replica.process is not None and replica.process.poll() is None:
            os.kill(replica.process.pid, signal.SIGCONT)
        replica.stop()
        master.stop()


def test_a_replica_falling_behind_alerts_the_admins_once(replicated, settings):
    master, replica = replicated
    settings.REDIS_URL = master.url
    settings.REPLICA_LAG_ALERT_BYTES = 256 * 1024
    factories.user("root", admin=True)
    assert check_replica_lag() == []  # online and in step
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGSTOP)  # connected, acknowledging nothing
    client = redis.Redis.from_url(master.url)
    for i in range(16):
        client.set(f"big:{i}", b"x" * 65_536)
    client.close()
    (event,) = check_replica_lag()
    assert event.kind == AlertEvent.Kind.REPLICA_LAG and event.team is None
    assert event.target == f"replica:127.0.0.1:{replica.port}"
    assert event.detail["lag_bytes"] > 256 * 1024 and event.detail["state"] == "online"
    assert "bytes behind (over 262,144)" in event.message
    assert check_replica_lag() == []  # within the throttle window
    settings.REPLICA_LAG_ALERT_BYTES = 0
    redis.Redis.from_url(master.url).delete("mqcloud:alert:replica-lag:" + event.detail["replica"])
    assert check_replica_lag() == []  # off


def test_replica_lags_from_info():
    info = {
        "role": "master",
        "master_repl_offset": 5000,
        "connected_slaves": 2,
        "slave0": {"ip": "10.0.0.2", "port": 6380, "state": "online", "offset": 4900, "lag": 0},
        "slave1": {"ip": "10.0.0.3", "port": 6380, "state": "wait_bgsave", "offset": 0, "lag": 3},
    }
    assert lags_of("m:6379", info) == [
        ReplicaLag("m:6379", "10.0.0.2:6380", "online", 100),
        ReplicaLag("m:6379", "10.0.0.3:6380", "wait_bgsave", 5000),
    ]
    assert lags_of("r:6380", {"role": "slave"}) == []
