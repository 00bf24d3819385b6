"""Template context shared by every console page."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def httpmq(request: HttpRequest) -> dict[str, str]:
    """``httpmq_url``: where clients reach the HTTP-MQ service (HTTPMQ_PUBLIC_URL); the web
    process itself does not serve ``/mq/``."""
    return {"httpmq_url": settings.HTTPMQ_PUBLIC_URL.rstrip("/")}


def accounts(request: HttpRequest) -> dict[str, bool]:
    """``self_registration``: whether anyone may register (the login page links to it)."""
    return {"self_registration": settings.SELF_REGISTRATION}
