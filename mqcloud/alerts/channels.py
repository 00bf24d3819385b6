"""Whether an alert channel (SMTP, the webhook, the SMS gateway) is worth trying now.

A channel that failed (unreachable, timed out, answered 5xx) is *paused* for
``ALERT_CHANNEL_PAUSE_SECONDS``, shared by every worker through Redis: what would have
gone through it meanwhile is kept on its event (``AlertEvent.pending``) and sent by
:func:`mqcloud.alerts.delivery.retry_pending` once the pause is over. Without it, a
gateway that hangs cost every alert its timeout: a check that fired 2,000 backlog alerts
in an outage held its Celery worker for hours, and the checks piling up behind it took
every worker slot from offset resets and pauses. A channel is known by its name and its
address, so another gateway configured meanwhile is tried at once.
"""

from __future__ import annotations

import contextlib
import hashlib
from functools import lru_cache

import redis
from django.conf import settings

PREFIX = "mqcloud:alert-channel:"


@lru_cache(maxsize=1)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def _key(channel: str, address: str) -> str:
    return PREFIX + channel + ":" + hashlib.sha256(address.encode()).hexdigest()[:16]


def paused(channel: str, address: str) -> bool:
    """Whether ``channel`` at ``address`` failed within the pause (Redis unreachable:
    not paused — the alert is tried rather than held)."""
    try:
        return bool(_client(settings.REDIS_URL).exists(_key(channel, address)))
    except redis.RedisError:
        return False


def pause(channel: str, address: str) -> None:
    """Mark ``channel`` at ``address`` failed now."""
    seconds = max(1, int(settings.ALERT_CHANNEL_PAUSE_SECONDS))
    with contextlib.suppress(redis.RedisError):
        _client(settings.REDIS_URL).set(_key(channel, address), 1, ex=seconds)


def resume(channel: str, address: str) -> None:
    """Forget a pause of ``channel`` at ``address`` (from a shell, once it is fixed)."""
    with contextlib.suppress(redis.RedisError):
        _client(settings.REDIS_URL).delete(_key(channel, address))
