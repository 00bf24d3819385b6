"""Whether an alert channel (SMTP, the webhook, the SMS gateway) is worth trying now.

A channel that failed (unreachable, timed out, answered 5xx) is *paused* for
``ALERT_CHANNEL_PAUSE_SECONDS``, shared by every worker through Redis: what would have
gone through it meanwhile is kept on its event (``AlertEvent.pending``) and sent by
:func:`mqcloud.alerts.delivery.retry_pending` once the pause is over. Without it, a
gateway that hangs cost every alert its timeout: a check that fired 2,000 backlog alerts
in an outage held its Celery worker for hours, and the checks piling up behind it took
every worker slot from offset resets and pauses. A channel is known by its name and its
address, so another gateway configured meanwhile is tried at once.

Platform admins see each configured channel's state on the alerts page (:func:`states`)
and may end a pause there once the channel is fixed (:func:`resume`).
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import urlsplit

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
    """Forget a pause of ``channel`` at ``address`` (once it is fixed)."""
    with contextlib.suppress(redis.RedisError):
        _client(settings.REDIS_URL).delete(_key(channel, address))


def mail_address() -> str:
    """The mail channel's address: the e-mail backend and its SMTP server."""
    return f"{settings.EMAIL_BACKEND} {settings.EMAIL_HOST}:{settings.EMAIL_PORT}"


class Channel(NamedTuple):
    """A configured channel."""

    name: str  # mail | webhook | sms
    label: str
    shown_address: str  # where it goes, without the secrets a URL may carry
    address: str  # what its pause is kept under


@dataclass(frozen=True)
class ChannelState:
    """A configured channel as the alerts page shows it."""

    name: str  # mail | webhook | sms
    label: str
    shown_address: str  # where it goes, without the secrets a URL may carry
    address: str
    paused_seconds: int | None  # None: not paused (or Redis cannot tell)


def _shown_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"


def configured() -> list[Channel]:
    """Each channel configured now."""
    out = [
        Channel("mail", "E-mail", f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}", mail_address())
    ]
    if settings.ALERT_WEBHOOK_URL:
        url = settings.ALERT_WEBHOOK_URL
        out.append(Channel("webhook", "Webhook", _shown_url(url), url))
    if settings.SMS_GATEWAY_URL:
        url = settings.SMS_GATEWAY_URL
        out.append(Channel("sms", "Text messages", _shown_url(url), url))
    return out


def find(name: str) -> Channel | None:
    """The configured channel called ``name`` (see :func:`configured`), or None."""
    return next((c for c in configured() if c.name == name), None)


def states() -> list[ChannelState]:
    """Each configured channel with the seconds left of its pause."""
    out = []
    for channel in configured():
        left = None
        with contextlib.suppress(redis.RedisError):
            ttl = _client(settings.REDIS_URL).ttl(_key(channel.name, channel.address))
            left = max(1, int(ttl)) if ttl is not None and ttl >= 0 else None
        out.append(ChannelState(*channel, left))
    return out
