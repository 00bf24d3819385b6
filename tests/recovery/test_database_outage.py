"""A PostgreSQL outage under a running broker: brokers serve from Redis, the database only
records that they are up, so the broker (its first process and its worker) keeps serving
producers and consumers through the outage, starts a worker that dies meanwhile again, logs
the outage once, and heartbeats again when the database is back."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from django.conf import settings as django_settings

from brokers.models import Broker
from tests.jmq4.conftest import build_catalog
from tests.recovery.db_gate import DatabaseGate
from tests.recovery.processes import BrokerProcesses, round_trip
from tests.web.test_processes import _listening_pids

OUTAGE_S = 3.0  # six heartbeats of 0.5 s


def _gated_url(gate: DatabaseGate) -> str:
    db = django_settings.DATABASES["default"]
    return f"postgres://{db['USER']}:{db['PASSWORD']}@127.0.0.1:{gate.port}/{db['NAME']}"


def _heartbeat() -> object:
    return Broker.objects.get(id=1).last_heartbeat


def _eventually(check, what: str, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.django_db(transaction=True)
def test_a_broker_serves_through_a_database_outage(redis_url, tmp_path):
    catalog = build_catalog(redis_url)  # `local` is led by broker 1
    gate = DatabaseGate(int(django_settings.DATABASES["default"]["PORT"]))
    brokers = BrokerProcesses(
        redis_url, tmp_path, DATABASE_URL=_gated_url(gate), BROKER_PROCESSES="2"
    )
    port = catalog.ports[1]
    with asyncio.Runner() as runner:
        try:
            brokers.start(1, port)
            _eventually(lambda: Broker.objects.get(id=1).status == "up", "never marked up")
            _eventually(lambda: len(_listening_pids(port)) == 2, "the worker never listened")
            assert runner.run(round_trip(port, catalog.token, b"before")) == [b"before"]

            gate.shut()
            time.sleep(0.6)  # a heartbeat has met the outage
            cut_at = _heartbeat()
            during = []
            for i in range(3):  # new connections, spread over both processes
                during += runner.run(round_trip(port, catalog.token, b"during %d" % i))
                time.sleep(OUTAGE_S / 3)
            assert during == [b"during 0", b"during 1", b"during 2"]
            assert brokers.alive(1)
            # a worker that dies now is started again without the database
            (worker,) = _listening_pids(port) - {brokers.pid(1)}
            os.kill(worker, signal.SIGKILL)
            _eventually(
                lambda: len(_listening_pids(port) - {brokers.pid(1), worker}) == 1,
                "no worker started again during the outage",
            )
            assert _heartbeat() == cut_at  # no heartbeat got through

            gate.open()
            _eventually(lambda: _heartbeat() != cut_at, "no heartbeat after the outage")
            assert Broker.objects.get(id=1).status == "up"
            assert runner.run(round_trip(port, catalog.token, b"after")) == [b"after"]
        finally:
            codes = brokers.stop_all()
            gate.close()
    log = brokers.log(1)
    assert codes == {1: 0}, log[-3000:]
    assert "the catalog database does not answer" in log
    assert log.count("the catalog database does not answer") <= 3  # once per process (3)
    assert "the catalog database answers again" in log
    assert "Traceback" not in log, log[-3000:]
    assert Broker.objects.get(id=1).status == "down"
