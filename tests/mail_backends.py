"""E-mail backends for tests: an SMTP server that is down, and the fixture that makes it
the backend and ends the mail channel's pause it causes (shared by every worker through
Redis, it would hold other tests' mail)."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator

import pytest
from django.core.mail.backends.base import BaseEmailBackend

DOWN = "tests.mail_backends.DownBackend"
"""``EMAIL_BACKEND`` of an SMTP server that refuses every message."""


class DownBackend(BaseEmailBackend):
    """An e-mail backend whose SMTP server refuses every message."""

    def send_messages(self, messages: list) -> int:
        raise smtplib.SMTPServerDisconnected("connection unexpectedly closed")


@pytest.fixture
def smtp_down(settings) -> Iterator[None]:
    """Mail goes to an SMTP server that is down (a test may switch it back meanwhile)."""
    from mqcloud.alerts import channels

    settings.EMAIL_BACKEND = DOWN
    address = channels.mail_address()
    yield
    channels.resume("mail", address)
