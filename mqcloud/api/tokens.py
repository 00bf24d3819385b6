"""Creating, listing and revoking personal API tokens — audited, for the console and API.

Everyone manages their own tokens; platform admins see and revoke everyone's. Each
creation and revocation is a line of the audit trail (``api-token-created`` /
``api-token-revoked``, target ``user:<username>``) naming the token, never its secret.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from mqcloud.api.models import ApiToken
from mqcloud.api.scoping import is_platform_admin
from mqcloud.approvals.services import record

MAX_LIFETIME = timedelta(days=3650)
NAME_MAX = 100


class TokenRequestError(ValueError):
    """A token request that cannot be granted (the message says why)."""


def tokens_visible_to(user: AbstractBaseUser) -> QuerySet[ApiToken]:
    """The caller's own tokens; every user's for a platform admin."""
    tokens = ApiToken.objects.select_related("user")
    return tokens if is_platform_admin(user) else tokens.filter(user=user)


def check_expiry(expires_at: datetime | None) -> None:
    """An expiry must lie in the future and within ten years."""
    if expires_at is None:
        return
    now = timezone.now()
    if expires_at <= now:
        raise TokenRequestError("The expiry must lie in the future.")
    if expires_at > now + MAX_LIFETIME:
        raise TokenRequestError("A token lives at most ten years.")


def _detail(token: ApiToken, via: str) -> dict:
    return {
        "token_id": token.pk,
        "name": token.name,
        "hint": token.hint,
        "read_only": token.read_only,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
        "via": via,
    }


@transaction.atomic
def create_token(
    user: AbstractBaseUser,
    name: str,
    *,
    read_only: bool = False,
    expires_at: datetime | None = None,
    via: str = "console",
) -> tuple[ApiToken, str]:
    """Issue a token of ``user``; (the stored token, its secret shown once)."""
    name = name.strip()
    if not name or len(name) > NAME_MAX or "\x00" in name:
        raise TokenRequestError(f"Name the token (1 to {NAME_MAX} characters).")
    check_expiry(expires_at)
    token, secret = ApiToken.create(user, name, read_only=read_only, expires_at=expires_at)
    record(user, "api-token-created", f"user:{user.get_username()}", detail=_detail(token, via))
    return token, secret


@transaction.atomic
def revoke_token(actor: AbstractBaseUser, token: ApiToken, *, via: str = "console") -> None:
    """Delete ``token`` (its owner or a platform admin); it stops working at once."""
    if token.user_id != actor.pk and not is_platform_admin(actor):
        raise PermissionError("Only the token's owner or a platform admin may revoke it.")
    detail = _detail(token, via)
    owner = token.user.get_username()
    token.delete()
    record(actor, "api-token-revoked", f"user:{owner}", detail=detail)
