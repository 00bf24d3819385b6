"""Tunables of a zbus server (zbus.md §1, §9, §10, §11, §13), all with production defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass

from brokers.protocols.zbus import MAX_BODY_BYTES, MAX_HEAD_BYTES


@dataclass(frozen=True, slots=True)
class ZbusConfig:
    """Limits and timings of one zbus server."""

    max_head_bytes: int = MAX_HEAD_BYTES
    max_body_bytes: int = MAX_BODY_BYTES
    """Capped at the engine's ``max_body`` when the server starts."""
    max_inflight: int = 256
    """Requests handled concurrently per connection; reading pauses beyond it."""
    max_held_bytes: int = 2 * MAX_BODY_BYTES
    """Message bytes those may hold together; reading pauses beyond it (a connection so
    holds at most this + one message + one read)."""
    admin_token: str = ""
    """``ZBUS_ADMIN_TOKEN``: empty means admin is open, as zbus 5 shipped (§13.3a)."""
    advertised: str = ""
    """``host:port`` written in ``broker`` headers; empty means the bound address."""
    client_timeout_guess: float = 10.0
    """Local consume timeout assumed for a connection that has not shown its own (§13.1)."""
    retire_fraction: float = 0.8
    """Parked consumes are retired at this fraction of the learned client timeout (§13.1)."""
    lease_ms: int = 600_000
    """How long a delivered queue message may stay in flight before the engine takes it back
    (only matters when the broker died without releasing it)."""
    reply_ttl: float = 60.0
    """Replies with no waiter are kept this long (§10)."""
    pubsub_buffer: int = 10_000
    """Messages buffered per pub/sub subscriber; the oldest are dropped beyond (§9.2)."""
    consumer_window_s: float = 60.0
    """A connection counts as a consumer this long after its last consume (§13.5)."""
    track_push_interval: float = 10.0
    """``track_pub`` is pushed to ``track_sub`` subscribers this often (§11.4)."""
    take_batch: int = 256
    """Queue messages taken from the engine per round (a streaming consumer's lease; the
    most read ahead for a long poller). 64 cost a streaming consumer 10-30% more CPU per
    message in leases; a consumer whose peer does not read is not dealt to."""
    read_ahead_hold: float = 1.0
    """Queue messages taken beyond what the parked sessions wanted wait this long (seconds)
    for the next sessions of their consumer, then go back to the group unread."""
    settle_delay: float = 0.05
    """Acks of queue deliveries (a consume settling the previous ones, a drained stream)
    wait at least this long (seconds) to go to the engine together: one call per group
    and partition for all of them. What a consumer acked meanwhile is still in flight for
    the engine: counted in its backlog, and delivered again if this process dies first."""
    settle_gather: int = 16
    """Fewer acks than this, in one MQ, wait past ``settle_delay`` for company, up to
    ``settle_max_delay``: so at most this many (or ``settle_delay``'s worth) wait longer.
    At fleet size (``bench/zbus_fleet.py``: 1,000 MQs, each long-polled, one process,
    every poller connected at once) each MQ is polled a few times a second: 50 ms alone
    sent an ack call per one or two polls (0.6-0.8 scripts, 7.6-10 Redis commands per
    poll); waiting for company for 16 sent 0.25-0.34 scripts and 3.8-5.3 commands, and
    the broker answered 1.35-1.7× the polls per second (three interleaved pairs of runs,
    2026-12-06)."""
    settle_max_delay: float = 0.5
    """The longest an ack waits for company (seconds)."""
    settle_batch: int = 1024
    """Acks waiting in one MQ that go at once, without waiting out ``settle_delay``."""
    drain_check_delay: float = 0.005
    """A streaming session's transport is looked at this long (seconds) after a dispatch
    round: what was written has left once it drained, and is settled then."""
    idle_recheck: float = 5.0
    """A pub/sub MQ's pump whose consumer is held back (paused, refused, rate-limited)
    looks again this often."""
    shutdown_grace: float = 5.0
    """How long a graceful stop waits for running requests."""

    @classmethod
    def from_environment(cls) -> ZbusConfig:
        """Defaults, with the admin token from Django settings or ``ZBUS_ADMIN_TOKEN``."""
        token = os.environ.get("ZBUS_ADMIN_TOKEN", "")
        try:
            from django.conf import settings

            token = getattr(settings, "ZBUS_ADMIN_TOKEN", token) or token
        except Exception:  # Django not configured (a bare script): the environment decides
            pass
        return cls(admin_token=token)
