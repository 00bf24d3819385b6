"""Tunables of a VibeMQ server (vibemq.md §1, §7, §14); production defaults throughout."""

from __future__ import annotations

from dataclasses import dataclass

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
    fanout_buffer: int = 1_000
    """Fan-out copies waiting for one slow subscriber; beyond it the oldest are dropped."""
    frames_per_second: int | None = None
    """Per-connection frame rate limit (sliding 1 s window); None: off."""
    max_connections: int = 10_000
    connections_per_ip: int | None = 600
    """New connections per client IP in a sliding 60 s window; None: off."""
    shutdown_grace: float = 30.0
    """How long a graceful stop waits for in-flight deliveries to be acknowledged."""
    max_pending_frames: int = 256
    """Decoded frames queued per connection before reading pauses (TCP backpressure)."""
    server_version: str = "mqcloud-vibemq/1.0"
    registry_ttl_ms: int = 15_000
    """A subscriber not refreshed for this long no longer counts (a crashed process)."""
    allowed_origins: tuple[str, ...] = ()
    """WebSocket Origin allow-list; empty accepts any origin (§16)."""
