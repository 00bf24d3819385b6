"""Tunables of a VibeMQ server (vibemq.md §1, §7, §14); production defaults throughout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from brokers.protocols.vibemq import MAX_FRAME_SIZE


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Settings shared by the TCP server and the WebSocket consumer."""

    max_frame_size: int = MAX_FRAME_SIZE
    auth_required: bool = True
    """Anonymous access only when an operator turns this off explicitly (§14)."""
    auto_create: bool = True
    """publish / subscribe create a missing queue with the defaults (§6, §7)."""
    max_unacked_per_subscriber: int = 100
    ack_timeout_ms: int = 30_000
    """Retry backoff is the engine's ``queue_retry`` (2 s · 2^(n−1), capped at 2 min)."""
    timer_interval: float = 1.0
    """Ack deadlines, retries and TTL are checked at least this often (seconds)."""
    retry_margin_ms: int = 5_000
    """A competing lease outlives its ack timeout by this much: the connection keeps a
    delivery that timed out for its own retry (§7) before the engine would take it back
    for the group (a crashed process's deliveries come back this much later). More than
    ``timer_interval``."""
    fanout_buffer: int = 1_000
    """FanOutWithoutAck messages waiting for one slow subscriber; beyond it the oldest are
    dropped. (A FanOutWithAck subscriber's messages wait in its member progress.)"""
    fanout_retention_ms: int = 24 * 3600 * 1000
    """How long a durable fan-out subscriber's progress (and so its unacked messages) waits
    for it to come back."""
    frames_per_second: int | None = None
    """Per-connection frame rate limit (sliding 1 s window); None: off."""
    max_connections: int = 10_000
    connections_per_ip: int | None = 600
    """New connections per client IP in a sliding 60 s window; None: off."""
    shutdown_grace: float = 30.0
    """How long a graceful stop waits for in-flight deliveries to be acknowledged."""
    max_pending_frames: int = 256
    """Decoded frames queued per connection before reading pauses (TCP backpressure)."""
    max_pending_bytes: int = 4 * 1024 * 1024
    """Wire bytes of those frames before reading pauses: a frame's decoded form keeps its
    body (and can be several times larger), so the count alone bounded nothing."""
    server_version: str = "mqcloud-vibemq/1.0"
    registry_ttl_ms: int = 15_000
    """A subscriber not refreshed for this long no longer counts (a crashed process)."""
    allowed_origins: tuple[str, ...] = ()
    """WebSocket Origin allow-list; empty accepts any origin (§16)."""
    monitor_port: int | None = None
    """HTTP port of ``/health`` and ``/metrics`` (§15); None: not served."""


def config_from(settings: Any) -> ServerConfig:
    """A :class:`ServerConfig` from the project settings' ``VIBEMQ_*`` values (any object
    with those attributes; missing ones keep the defaults)."""
    d = ServerConfig()

    def get(name: str, fallback: Any) -> Any:
        return getattr(settings, f"VIBEMQ_{name}", fallback)

    return ServerConfig(
        max_frame_size=int(get("MAX_FRAME_SIZE", d.max_frame_size)),
        auth_required=not get("ALLOW_ANONYMOUS", False),
        auto_create=bool(get("AUTO_CREATE", d.auto_create)),
        max_unacked_per_subscriber=int(get("MAX_UNACKED", d.max_unacked_per_subscriber)),
        ack_timeout_ms=int(get("ACK_TIMEOUT_MS", d.ack_timeout_ms)),
        frames_per_second=int(get("FRAMES_PER_SECOND", 0) or 0) or None,
        max_connections=int(get("MAX_CONNECTIONS", d.max_connections)),
        connections_per_ip=int(get("CONNECTIONS_PER_IP", d.connections_per_ip) or 0) or None,
        fanout_retention_ms=int(get("FANOUT_RETENTION_MS", d.fanout_retention_ms)),
        allowed_origins=tuple(get("WS_ALLOWED_ORIGINS", ()) or ()),
        monitor_port=get("MONITOR_PORT", None),
    )
