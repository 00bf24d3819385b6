"""Login through an external identity provider (console-features "Login is pluggable:
local accounts, or an external identity provider").

A single-sign-on proxy in front of the web process (oauth2-proxy, Authelia, Keycloak's
gatekeeper, a web server's own SSO module) authenticates the user with the company's
identity provider and passes the username in a header, ``LOGIN_HEADER`` (for example
``X-Forwarded-User``; empty, the default, turns this off). :class:`HeaderLoginMiddleware`
logs that user in — creating the account on its first visit, in no team and without a
usable password, unless ``LOGIN_HEADER_CREATE_USERS`` is off — and believes the header
only from the peers in ``LOGIN_HEADER_TRUSTED_PROXIES`` (the proxy's addresses), so a
client that reaches the web process directly cannot name itself anyone. Local accounts
keep working beside it (an admin's way in when the identity provider is down). A header
naming an account that is switched off, or not a valid username, logs nobody in.

The backend is called directly, not through ``authenticate()``: a refusal is not a failed
password, so it never counts towards django-axes' lockout of the proxy's address.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.backends import RemoteUserBackend
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.validators import validate_email
from django.http import HttpRequest, HttpResponse

from mqcloud.approvals.services import record

log = logging.getLogger(__name__)
BACKEND = "mqcloud.console.header_login.HeaderUserBackend"
USERNAME_MAX = 150


def meta_key(header: str) -> str:
    """The ``request.META`` key of an HTTP header name (``X-Forwarded-User`` →
    ``HTTP_X_FORWARDED_USER``)."""
    return "HTTP_" + header.strip().upper().replace("-", "_")


def trusted_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``LOGIN_HEADER_TRUSTED_PROXIES`` as networks (an address is a network of one)."""
    return [
        ipaddress.ip_network(entry, strict=False) for entry in settings.LOGIN_HEADER_TRUSTED_PROXIES
    ]


def from_trusted_proxy(request: HttpRequest) -> bool:
    """Whether the request's peer is one the login header is believed from."""
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(peer in network for network in trusted_networks())


def clean_username(raw: str) -> str | None:
    """The username a header names, or None when it is not one (empty, too long, or
    characters a username may not have)."""
    name = raw.strip()
    if not name or len(name) > USERNAME_MAX:
        return None
    try:
        UnicodeUsernameValidator()(name)
    except ValidationError:
        return None
    return name


class HeaderUserBackend(RemoteUserBackend):
    """The user a trusted proxy named: created on its first visit (no team, no usable
    password) while ``LOGIN_HEADER_CREATE_USERS`` is on; an account switched off is
    refused. Answers nothing unless :class:`HeaderLoginMiddleware` asks."""

    @property
    def create_unknown_user(self) -> bool:  # type: ignore[override]
        return settings.LOGIN_HEADER_CREATE_USERS

    def configure_user(
        self, request: HttpRequest, user: AbstractBaseUser, created: bool = True
    ) -> AbstractBaseUser:
        if created:
            user.set_unusable_password()
            email = request.META.get(meta_key(settings.LOGIN_HEADER_EMAIL), "").strip()
            if settings.LOGIN_HEADER_EMAIL and email:
                try:
                    validate_email(email)
                except ValidationError:
                    email = ""
                user.email = email[:254]
            user.save()
            record(
                user,
                "user-registered",
                f"user:{user.get_username()}",
                detail={"via": "login-header"},
            )
        return user


class HeaderLoginMiddleware:
    """Logs in the user the trusted proxy names in ``LOGIN_HEADER`` (after the
    authentication middleware; see the module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        if settings.LOGIN_HEADER:
            try:
                trusted_networks()
            except ValueError as exc:
                raise ImproperlyConfigured(f"LOGIN_HEADER_TRUSTED_PROXIES: {exc}") from exc

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if settings.LOGIN_HEADER:
            raw = request.META.get(meta_key(settings.LOGIN_HEADER))
            if raw is not None and from_trusted_proxy(request):
                self._log_in(request, raw)
        return self.get_response(request)

    def _log_in(self, request: HttpRequest, raw: str) -> None:
        name = clean_username(raw)
        if name is None:
            log.warning("login header names no valid username: ignored")
            return
        current = request.user
        if current.is_authenticated and current.get_username() == name:
            return
        user = HeaderUserBackend().authenticate(request, remote_user=name)
        if user is None:  # switched off, or unknown while accounts are not created
            if current.is_authenticated:
                auth.logout(request)  # the proxy says someone else is at the keyboard
            return
        if current.is_authenticated:
            auth.logout(request)
        auth.login(request, user, backend=BACKEND)
        request.user = user
