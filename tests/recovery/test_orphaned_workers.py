"""A worker process whose parent died (killed with SIGKILL) does not outlive it for long:
the parent-death SIGTERM stops it gracefully, and when that stop does not come or does not
end, its parent watch ends it within the grace it was given — a worker left behind would
hold the ports and keep reporting itself with no one supervising it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from brokers.worker_processes import watch_parent
from tests.proc_state import exited, process_state
from tests.recovery.processes import ROOT

CHILD = """
import signal, sys, time
from brokers.worker_processes import follow_parent
if sys.argv[2] == "ignore":  # a stop that never comes
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("following" if follow_parent(int(sys.argv[1]), float(sys.argv[3])) else "gone", flush=True)
time.sleep(120)
"""

PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), *sys.argv[2:]],
                         stdout=open(sys.argv[4], "w"))
print(child.pid, flush=True)
time.sleep(120)
"""


def _until_gone(pid: int, within: float) -> float:
    """Seconds until ``pid`` exited (or is a zombie no one reaped yet)."""
    started = time.monotonic()
    while not exited(pid):
        assert time.monotonic() - started < within, f"pid {pid} still {process_state(pid)}"
        time.sleep(0.05)
    return time.monotonic() - started


def _orphan(tmp_path: Path, on_sigterm: str, grace_s: float) -> float:
    """Start a parent and its following child, kill the parent with SIGKILL; seconds
    until the child was gone."""
    out = tmp_path / "child.out"
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENT), textwrap.dedent(CHILD), on_sigterm,
         str(grace_s), str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while not out.exists() or out.read_text() != "following\n":
            assert time.monotonic() < deadline, "the child never followed its parent"
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        return _until_gone(child, within=grace_s + 20)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_an_orphan_stops_on_the_parent_death_signal(tmp_path):
    """The usual way: SIGTERM as the parent dies, long before the watch's grace."""
    assert _orphan(tmp_path, "default", grace_s=60) < 30


def test_an_orphan_that_does_not_stop_is_ended_after_its_grace(tmp_path):
    """SIGTERM ignored (a graceful stop that never comes): the watch ends it once the
    grace is over, not before."""
    took = _orphan(tmp_path, "ignore", grace_s=1.5)
    assert took >= 1.5 - 0.1


def test_the_watch_ends_a_process_whose_parent_is_gone():
    calls: list[object] = []
    not_my_parent = -1
    watch_parent(not_my_parent, 0.01, every_s=0.01, exit_now=calls.append)
    assert calls == [1]


def test_without_the_death_signal_the_watch_asks_for_a_stop_first():
    calls: list[object] = []
    watch_parent(
        -1,
        0.01,
        ask_first=True,
        every_s=0.01,
        exit_now=calls.append,
        ask_to_stop=lambda: calls.append("stop"),
    )
    assert calls == ["stop", 1]


def test_the_watch_waits_while_the_parent_lives():
    """In a child of this process: nothing happens while the parent (here) lives."""
    script = (
        "import os, sys, threading, time\n"
        "from brokers.worker_processes import watch_parent\n"
        "threading.Thread(target=watch_parent, args=(os.getppid(), 0.01),\n"
        "                 kwargs={'every_s': 0.01}, daemon=True).start()\n"
        "time.sleep(1.0)\n"
        "print('still here', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (0, b"still here\n"), done.stderr[-2000:]
