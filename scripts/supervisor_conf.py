"""The supervisord configuration of ``make run``, made from ``Procfile``.

``Procfile`` stays the one list of the platform's processes (``name: command``, the
command run by ``/bin/sh`` so that ``${VARIABLES}`` expand). Every process is started by
supervisord and restarted when it exits: at once when it had been running for
``startsecs``, else after a back-off that grows by a second per failed start (1 s, 2 s, …)
until ``startretries`` starts failed in a row, when supervisord gives up on that one
process (state FATAL) and keeps the others serving. supervisord logs each of these steps
("exited: broker1 (terminated by SIGKILL; not expected)", "spawned: …", "gave up: …").

Each process gets its own process group, so Ctrl-C in the terminal reaches supervisord
only, which stops every process (SIGTERM to its whole group, SIGKILL after
``stopwaitsecs``) before it exits. ``supervisorctl -c <run dir>/supervisord.conf status``
shows them; ``… restart broker1`` restarts one.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

START_SECONDS = 5  # a process up this long counts as started
START_RETRIES = 20  # failed starts in a row before giving up (back-off 1 s … 20 s)
STOP_WAIT_SECONDS = 20  # SIGTERM, then SIGKILL after this long

_LINE = re.compile(r"^(?P<name>[A-Za-z0-9_-]+):\s*(?P<command>.+)$")


def parse_procfile(text: str) -> list[tuple[str, str]]:
    """``(name, command)`` pairs of a Procfile (blank lines and ``#`` comments skipped)."""
    processes = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"not a Procfile line: {raw!r}")
        processes.append((match["name"], match["command"]))
    return processes


def _ini(value: str) -> str:
    """``value`` safe in supervisord's config (it expands ``%(name)s`` itself)."""
    return value.replace("%", "%%")


def _quoted(command: str) -> str:
    return "'" + command.replace("'", "'\"'\"'") + "'"


def render(processes: list[tuple[str, str]], run_dir: Path, root: Path) -> str:
    """supervisord.conf running ``processes`` from ``root``, its files under ``run_dir``.

    supervisord writes its own log to ``run_dir/supervisord.log`` and, in the foreground,
    to the terminal; the processes' output goes to the terminal. Its control socket (for
    supervisorctl, which reads the same file) is private to the user and password-guarded.
    """
    run_dir = run_dir.resolve()
    socket = _ini(str(run_dir / "supervisor.sock"))
    password = secrets.token_urlsafe(16)
    sections = [
        "[supervisord]",
        "nodaemon = true",
        f"logfile = {_ini(str(run_dir / 'supervisord.log'))}",
        "logfile_maxbytes = 10MB",
        "logfile_backups = 2",
        "loglevel = info",
        f"pidfile = {_ini(str(run_dir / 'supervisord.pid'))}",
        f"childlogdir = {_ini(str(run_dir))}",
        f"directory = {_ini(str(root))}",
    ]
    if os.geteuid() == 0:
        sections.append("user = root")  # running as root on purpose (no warning)
    sections += [
        "",
        "[unix_http_server]",
        f"file = {socket}",
        "chmod = 0700",
        "username = mqcloud",
        f"password = {password}",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        "",
        "[supervisorctl]",
        f"serverurl = unix://{socket}",
        "username = mqcloud",
        f"password = {password}",
    ]
    for name, command in processes:
        sections += [
            "",
            f"[program:{name}]",
            f"command = /bin/sh -c {_ini(_quoted('exec ' + command))}",
            f"directory = {_ini(str(root))}",
            "autostart = true",
            "autorestart = true",
            f"startsecs = {START_SECONDS}",
            f"startretries = {START_RETRIES}",
            "stopsignal = TERM",
            f"stopwaitsecs = {STOP_WAIT_SECONDS}",
            "stopasgroup = true",
            "killasgroup = true",
            "redirect_stderr = true",
            "stdout_logfile = /dev/stdout",
            "stdout_logfile_maxbytes = 0",
        ]
    return "\n".join(sections) + "\n"
