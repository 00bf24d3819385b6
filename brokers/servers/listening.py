"""The accept queue the brokers' protocol ports listen with.

asyncio's ``create_server`` listens with a backlog of 100 connections. A broker serving a
fleet gets far more at once: when it restarts, or when its clients all lose their
connections together (a network blip, a failover), thousands reconnect within a moment
while its event loop is busy serving the rest. Past the backlog the kernel drops the
handshakes, and each client so dropped waits for its SYN to be sent again — 1 s, then
3 s, 7 s, 15 s later. Measured with the default: of 1,000 zbus long pollers connecting at
once to a broker busy delivering, 99 got no message for 10 s.

Every listening port of a broker process uses :data:`LISTEN_BACKLOG` (the HTTP-MQ proxy's
serving processes too, and the Procfile's daphne endpoint for VibeMQ over WebSocket); the
kernel caps it at ``net.core.somaxconn`` (4096 by default since Linux 5.4 — raise that
too where a process takes more at once).
"""

from __future__ import annotations

LISTEN_BACKLOG = 4096
"""Connections the kernel completes for a listening port before its loop accepts them."""
