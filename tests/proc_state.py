"""What /proc says of a process the tests started and lost track of (it was reparented
when its parent was killed, so nobody here can wait for it)."""

from __future__ import annotations


def process_state(pid: int) -> str:
    """The process's state letter (``R``, ``S``, ``Z``…), or ``"gone"``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def exited(pid: int) -> bool:
    """Exited, or exited and not reaped yet (a zombie: its new parent may never reap it)."""
    return process_state(pid) in ("gone", "Z")


def command_line(pid: int) -> str:
    """The process's command line (200 characters at most), ``""`` when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except FileNotFoundError:
        return ""
