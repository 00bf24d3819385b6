"""The zbus benchmark's goal verdicts: a peer phase that stalled is no baseline. One run's
Java RPC phase answered 327 calls/s with 32 replies lost and the machine 3 % busy, and the
benchmark printed "rpc met" against it."""

from __future__ import annotations

from bench import zbus
from bench.zbus_load import Result


def _target(name: str, rate: float, *, busy: float = 0.9, waiting: float = 0.0, lost: int = 0):
    t = zbus.Target(name, 0, 0, ours=name == "ours")
    t.results["rpc"] = Result(rate=rate, count=int(rate * 4), seconds=4, lost=lost)
    t.results["rpc"].waiting = waiting
    t.busy["rpc"] = busy
    return t


def test_a_healthy_peer_gives_a_verdict_either_way():
    # 20 replies lost in 4 s of 8 callers, as in a healthy Java run: 20 s of 32 waited
    peer = _target("java", 6_000, lost=20, waiting=20 / 32)
    assert zbus.verdict(_target("ours", 12_500), peer, "rpc") == "met"
    assert zbus.verdict(_target("ours", 5_300), peer, "rpc") == "NOT met"


def test_a_peer_whose_callers_mostly_waited_out_lost_replies_gives_no_verdict():
    peer = _target("java", 327, lost=32, waiting=32 * 1.0 / (8 * 4.4))
    got = zbus.verdict(_target("ours", 5_270), peer, "rpc")
    assert got.startswith("NO VERDICT") and "waiting for lost replies" in got


def test_a_peer_phase_with_an_idle_machine_gives_no_verdict():
    peer = _target("java", 2_000, busy=0.03)
    got = zbus.verdict(_target("ours", 5_270), peer, "rpc")
    assert got.startswith("NO VERDICT") and "3% busy" in got


def test_a_peer_that_stopped_answering_gives_no_verdict():
    peer = _target("java", 0)
    peer.stalled = "stalled in rpc: a connection got no reply within 30 s"
    assert zbus.verdict(_target("ours", 5_270), peer, "rpc").startswith("NO VERDICT")
