"""A worker process of ``runbroker --processes 2`` killed (kill -9, as the OOM killer does):
the first process starts it again within seconds, says so in its log and in the exits
the process alerts read, and serves meanwhile; stopping the broker stops the new worker too."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from brokers.clients.jmq4.connection import Jmq4Error
from brokers.engine import engine_client, take_exits
from tests.jmq4.conftest import build_catalog
from tests.recovery.processes import ROOT, BrokerProcesses, round_trip
from tests.web.test_processes import _alive, _listening_pids


def _workers(port: int, parent: int, within: float = 30) -> set[int]:
    """The pids besides ``parent`` listening on ``port``, once there is one."""
    deadline = time.monotonic() + within
    while True:
        pids = _listening_pids(port)
        if parent in pids and len(pids) == 2:
            return pids - {parent}
        assert time.monotonic() < deadline, f"listening: {pids}"
        time.sleep(0.1)


def _reconnecting(runner: asyncio.Runner, port: int, token: str, body: bytes) -> list[bytes]:
    """:func:`round_trip`, again on a fresh connection if the first was reset (3 tries)."""
    for attempt in range(3):
        try:
            return runner.run(round_trip(port, token, body))
        except Jmq4Error:
            if attempt == 2:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


async def _exits(redis_url: str) -> list[dict]:
    client = engine_client(redis_url)
    try:
        return await take_exits(client)
    finally:
        await client.aclose()


@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_process_is_started_again(redis_url, tmp_path):
    catalog = build_catalog(redis_url)  # `local` is led by broker 1
    brokers = BrokerProcesses(redis_url, tmp_path, BROKER_PROCESSES="2")
    port = catalog.ports[1]
    new: set[int] = set()
    with asyncio.Runner() as runner:
        try:
            brokers.start(1, port)
            parent = brokers.pid(1)
            (old,) = _workers(port, parent)
            os.kill(old, signal.SIGKILL)
            killed = time.monotonic()
            while old in _listening_pids(port):  # its sockets close as it dies
                assert time.monotonic() - killed < 10
                time.sleep(0.02)
            # the first process serves meanwhile: a connection the kernel handed to a
            # listener that was just closing or starting is reset, and a client reconnects
            assert _reconnecting(runner, port, catalog.token, b"meanwhile") == [b"meanwhile"]
            new = _workers(port, parent)
            assert old not in new
            took = time.monotonic() - killed
            assert took < 15, took  # a heartbeat (0.5 s) and a Django start
            assert runner.run(round_trip(port, catalog.token, b"after")) == [b"after"]
            log = brokers.log(1)
            assert f"worker 1 (pid {old}) was killed by SIGKILL; starting it again" in log
            assert "worker 1 started again (pid " in log
            # recorded for the process alerts (mqcloud.alerts.processes)
            exits = runner.run(_exits(redis_url))
            assert [(e["service"], e["process"], e["how"]) for e in exits if e["pid"] == old] == [
                ("broker 1", 1, "was killed by SIGKILL")
            ]
        finally:
            codes = brokers.stop_all()
    assert codes == {1: 0}, brokers.log(1)[-3000:]
    for pid in new:  # stopped with the broker, not left behind
        deadline = time.monotonic() + 10
        while _alive(pid):
            assert time.monotonic() < deadline, f"worker {pid} outlived its broker"
            time.sleep(0.1)
    assert "Traceback" not in brokers.log(1)


def test_a_worker_whose_first_process_is_gone_does_not_serve(tmp_path):
    """Started for a first process that died meanwhile: it exits at once."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    done = subprocess.run(
        [sys.executable, "manage.py", "runbroker", "--broker-id", "1", "--worker", "1",
         "--worker-of", str(gone.pid), "--worker-ports", "1,2,-"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert b"Traceback" not in done.stderr
