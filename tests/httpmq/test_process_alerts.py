"""HTTP-MQ serving processes report themselves: the console lists them, a process killed
with ``kill -9`` alone is started again by the supervisor and alerts the platform admins
("process died and restarted"), and a proxy killed whole stops reporting, which alerts
them once ("HTTP-MQ proxy down"). A proxy stopped on purpose withdraws its report and
alerts nobody."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core import mail

from brokers.engine import engine_client, read_reports
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.processes import check_processes
from proxy.httpmq.report import BOARD as PROXY_BOARD
from tests import factories
from tests.httpmq.conftest import start_proxy, stop
from tests.proc_state import command_line, exited, process_state
from tests.scripts_path import free_port

pytestmark = pytest.mark.django_db

REPORT_S = "0.3"
"""How often the proxies of these tests report: valid for 0.9 s."""


def proxy_reports(port: int) -> dict[str, dict[str, Any]]:
    """The valid reports of the proxy processes on ``port``, by name."""

    async def read() -> dict[str, dict[str, Any]]:
        client = engine_client(settings.REDIS_URL)
        try:
            return await read_reports(client, board=PROXY_BOARD)
        finally:
            await client.aclose()

    return {n: d for n, d in async_to_sync(read)().items() if d.get("port") == port}


def until(check: Callable[[], Any], what: str, within: float = 30) -> Any:
    deadline = time.monotonic() + within
    while not (found := check()):
        assert time.monotonic() < deadline, f"waited {within} s for {what}"
        time.sleep(0.1)
    return found


def alerts_of(port: int) -> list[AlertEvent]:
    """What a process check fires about the proxy on ``port`` (others' alerts left out)."""
    return [e for e in check_processes() if f":{port}" in e.target or f":{port}" in e.message]


@pytest.fixture
def admin():
    return factories.user("root", admin=True)


def test_a_killed_serving_process_is_restarted_and_alerts_the_admins(admin, tmp_path):
    port = free_port()
    proc = start_proxy(port, tmp_path / "proxy.log", processes=2, HTTPMQ_REPORT_SECONDS=REPORT_S)
    try:
        reports = until(lambda: len(r := proxy_reports(port)) == 2 and r, "two reports")
        assert {d["process"] for d in reports.values()} == {0, 1}
        victim = next(d for d in reports.values() if d["process"] == 1)
        os.kill(victim["pid"], signal.SIGKILL)

        def replaced() -> bool:
            now = proxy_reports(port)
            return any(d["process"] == 1 and d["pid"] != victim["pid"] for d in now.values())

        until(replaced, "the killed process started again and reporting")
        fired = alerts_of(port)
        exits = [e for e in fired if e.kind == AlertEvent.Kind.PROCESS_EXIT]
        assert len(exits) == 1, [e.message for e in fired]
        assert f"process 1 (pid {victim['pid']}) was killed by SIGKILL" in exits[0].message
        assert exits[0].detail["pid"] == victim["pid"] and exits[0].team is None
        assert mail.outbox[-1].to == ["root@example.test"]
        assert not [e for e in alerts_of(port) if e.kind == AlertEvent.Kind.PROCESS_EXIT]
    finally:
        stop(proc)
    # stopped on purpose: every report withdrawn (each serving process withdraws its own as
    # it shuts down, which a loaded machine may take a while to finish), nothing to alert
    until(lambda: proxy_reports(port) == {}, "every report withdrawn")
    time.sleep(1)
    assert alerts_of(port) == []


def test_serving_processes_stop_with_a_killed_supervisor(admin, tmp_path):
    """A supervisor killed with SIGKILL (the OOM killer, a hung stop's last resort) takes
    its serving processes with it: none is left holding the port and reporting."""
    port = free_port()
    proc = start_proxy(port, tmp_path / "proxy.log", processes=2, HTTPMQ_REPORT_SECONDS=REPORT_S)
    try:
        reports = until(lambda: len(r := proxy_reports(port)) == 2 and r, "two reports")
        children = [d["pid"] for d in reports.values()]
        proc.kill()
        proc.wait()
        try:
            until(lambda: proxy_reports(port) == {}, "every serving process gone")
        except AssertionError as exc:  # it failed once in CI, unreproduced: say what was left
            log = (tmp_path / "proxy.log").read_text(errors="replace")[-4000:]
            left = {pid: f"{process_state(pid)} {command_line(pid)}" for pid in children}
            raise AssertionError(
                f"{exc}; reports {proxy_reports(port)}; children {left}; proxy log tail:\n{log}"
            ) from None

        until(lambda: all(exited(pid) for pid in children), "the serving processes to exit")
    finally:
        if proc.poll() is None:
            stop(proc)


def test_a_proxy_that_stops_reporting_alerts_once(admin, tmp_path, client):
    port = free_port()
    proc = start_proxy(port, tmp_path / "proxy.log", HTTPMQ_REPORT_SECONDS=REPORT_S)
    try:
        (name,) = until(lambda: proxy_reports(port), "the proxy's report")
        pid = proxy_reports(port)[name]["pid"]
        assert name.endswith(f":{port}/0") and pid == proc.pid
        client.force_login(factories.user("viewer"))
        page = client.get("/clusters/").content.decode()
        assert name in page and f'<td class="num">{pid}</td>' in page
        assert alerts_of(port) == []  # it reports
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        until(lambda: not proxy_reports(port), "its report to lapse")
        (event,) = alerts_of(port)
        assert event.kind == AlertEvent.Kind.PROXY_DOWN and event.target == f"httpmq:{name}"
        assert f"HTTP-MQ proxy process {name} (pid {pid}) stopped reporting" in event.message
        assert alerts_of(port) == []  # once
        assert name not in client.get("/clusters/").content.decode()
    finally:
        if proc.poll() is None:
            stop(proc)
