"""Template context shared by every console page."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from mqcloud.console.announcements import banners


def httpmq(request: HttpRequest) -> dict[str, str]:
    """``httpmq_url``: where clients reach the HTTP-MQ service (HTTPMQ_PUBLIC_URL); the web
    process itself does not serve ``/mq/``."""
    return {"httpmq_url": settings.HTTPMQ_PUBLIC_URL.rstrip("/")}


def accounts(request: HttpRequest) -> dict[str, bool]:
    """``self_registration``: whether anyone may register (the login page links to it)."""
    return {"self_registration": settings.SELF_REGISTRATION}


def announcements(request: HttpRequest) -> dict[str, object]:
    """``announcements``: the platform admins' running announcements this user has not
    hidden (read only by a page that shows them)."""
    return {"announcements": SimpleLazyObject(lambda: banners(request))}
