"""The console's view of the clients the engine lists (:mod:`brokers.engine.clients`):
the platform's client inventory for the admins, an app's clients on its page, each
producer's live clients on its topic's page ("verify producer": before a producer is
retired or its topic moved, does any client still use it?) and a consumer's on its own
page (the same question before it is paused, reset or removed)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from brokers.engine import ClientRow
from mqcloud.console import access, engine_calls

LIVE_MS = 60_000
"""A client that produced this recently counts as live even without a connection (an
HTTP-MQ producer keeps none)."""
UNKNOWN = "unknown"
"""The protocol filter's value (and label) for clients whose protocol nobody stated."""


def ago(ms: int, now_ms: int) -> str:
    """How long before ``now_ms`` ``ms`` was, briefly ('—' for never)."""
    if ms <= 0:
        return "—"
    s = max(0, (now_ms - ms) // 1000)
    if s < 60:
        return f"{s} s ago"
    if s < 3600:
        return f"{s // 60} min ago"
    if s < 86400:
        return f"{s // 3600} h ago"
    return f"{s // 86400} d ago"


def kind_label(protocol: str, language: str, version: str) -> str:
    """``jmq4 · JAVA · 4.2.3``; what a client left unsaid is left out."""
    return " · ".join(x for x in (protocol or "unknown", language, version) if x)


@dataclass(frozen=True)
class LiveClient:
    """One host of an app that produced to (or consumed) a topic and is live."""

    host: str
    kind: str
    connections: int
    last: str


def live_clients(
    topic: str, rows: Sequence[ClientRow], now_ms: int, role: str = "produce"
) -> list[LiveClient]:
    """The hosts in ``rows`` (one app's clients) live in ``role`` ('produce' or
    'consume') on ``topic``: they did it within ``LIVE_MS``, or did it once and are
    connected now."""
    out = []
    for r in rows:
        last = max((at for t, did, at in r.topics if t == topic and did == role), default=0)
        if last and (r.connections > 0 or now_ms - last <= LIVE_MS):
            out.append(
                LiveClient(
                    r.host,
                    kind_label(r.protocol, r.language, r.version),
                    r.connections,
                    ago(last, now_ms),
                )
            )
    return out


def attach_live_producers(topic: str, producers: Iterable) -> str:
    """Set ``live_clients`` on each producer policy of ``topic`` (one engine read for
    them all); the engine's error, or ''."""
    producers = list(producers)
    try:
        rows = engine_calls.clients_of(sorted({p.app.code for p in producers}))
    except engine_calls.EngineUnavailable as exc:
        for p in producers:
            p.live_clients = None
        return str(exc)
    now = int(time.time() * 1000)
    for p in producers:
        p.live_clients = live_clients(topic, rows.get(p.app.code, []), now)
    return ""


def live_consumers(topic: str, app: str) -> tuple[list[LiveClient] | None, str]:
    """The live clients of ``app``'s consumer of ``topic``, and the engine's error or ''
    (then None: not known, which is not "none")."""
    try:
        rows = engine_calls.clients_of([app]).get(app, [])
    except engine_calls.EngineUnavailable as exc:
        return None, str(exc)
    return live_clients(topic, rows, int(time.time() * 1000), "consume"), ""


def app_client_rows(app: str) -> tuple[list[dict], str]:
    """An app's clients for its page: each host and kind with its connections and the
    topics it used; and the engine's error, or ''."""
    try:
        rows = engine_calls.clients_of([app]).get(app, [])
    except engine_calls.EngineUnavailable as exc:
        return [], str(exc)
    now = int(time.time() * 1000)
    return [
        {
            "host": r.host,
            "kind": kind_label(r.protocol, r.language, r.version),
            "connections": r.connections,
            "topics": [
                {"topic": t, "role": role, "last": ago(at, now)} for t, role, at in r.topics
            ],
        }
        for r in rows
    ], ""


@login_required
def client_inventory(request: HttpRequest) -> HttpResponse:
    """Platform admins: every kind of client (protocol, language, version) with the apps
    and hosts that run it; ``?protocol=`` narrows it to one protocol."""
    access.require_platform_admin(request.user)
    try:
        rows, error = engine_calls.client_inventory(), ""
    except engine_calls.EngineUnavailable as exc:
        rows, error = [], str(exc)
    choices = {r.protocol or UNKNOWN: r.protocol for r in rows}  # filter value → protocol
    wanted = request.GET.get("protocol", "")
    if wanted not in choices:
        wanted = ""  # a protocol no client uses narrows nothing
    now = int(time.time() * 1000)
    kinds = [
        {
            "protocol": r.protocol or "unknown",
            "language": r.language or "—",
            "version": r.version or "—",
            "apps": sorted(r.apps),
            "hosts": len(r.hosts),
            "connections": r.connections,
            "last": ago(r.last_ms, now),
        }
        for r in rows
        if not wanted or r.protocol == choices[wanted]
    ]
    return render(
        request,
        "console/clients.html",
        {"kinds": kinds, "protocols": sorted(choices), "protocol": wanted, "engine_error": error},
    )
