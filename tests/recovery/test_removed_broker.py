"""A broker removed from the catalog while it runs stops serving, says why in its log and
in /healthz and /metrics, waits, and serves again when added back (issue 20 item 8)."""

from __future__ import annotations

import socket
import time

import pytest

from brokers.catalog_loader import publish
from brokers.models import Broker, Cluster
from tests.jmq4.conftest import build_catalog
from tests.recovery.processes import BrokerProcesses
from tests.scripts_path import free_port, wait_for_port


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False


def _eventually(check, what: str, within: float = 15) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _row(cluster: Cluster) -> Broker:
    broker = Broker.objects.create(
        id=3,
        cluster=cluster,
        host="127.0.0.1",
        jmq4_port=free_port(),
        zbus_port=free_port(),
        vibemq_port=free_port(),
    )
    publish()
    return broker


def _health(client) -> dict:
    return client.get("/healthz").json()["brokers"].get("3", {})


@pytest.mark.django_db(transaction=True)
def test_a_removed_broker_waits_and_serves_again_when_added_back(
    own_redis, tmp_path, settings, client
):
    settings.REDIS_URL = own_redis.url
    build_catalog(own_redis.url)
    cluster = Cluster.objects.get()
    first = _row(cluster)
    brokers = BrokerProcesses(own_redis.url, tmp_path)
    try:
        brokers.start(3, first.jmq4_port)
        _eventually(lambda: _health(client).get("state") == "serving", "never reported serving")

        Broker.objects.filter(id=3).delete()
        publish()
        _eventually(
            lambda: (
                not any(_listens(p) for p in (first.jmq4_port, first.zbus_port, first.vibemq_port))
            ),
            "the removed broker still serves",
        )
        _eventually(lambda: _health(client).get("state") == "removed", "health never said so")
        assert _health(client)["reason"] == "broker 3 was removed from the catalog"
        metrics = client.get("/metrics").content.decode()
        assert 'mqcloud_broker_serving{broker="3"} 0.0' in metrics
        assert "broker 3 was removed from the catalog: stopped serving" in brokers.log(3)
        time.sleep(1.5)  # three heartbeats: it waits, it does not exit
        assert brokers.alive(3)

        second = _row(cluster)  # added back, on other ports
        wait_for_port(second.jmq4_port, timeout=15)
        _eventually(lambda: _health(client).get("state") == "serving", "never served again")
        assert _listens(second.zbus_port) and _listens(second.vibemq_port)
        assert "broker 3 is in the catalog again: serving" in brokers.log(3)
    finally:
        codes = brokers.stop_all()
    assert codes == {3: 0}
    log = brokers.log(3)
    assert "broker 3 stopped" in log and "Traceback" not in log and "CommandError" not in log
