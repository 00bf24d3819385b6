"""Personal API tokens of console users: hashed at rest, shown once when issued.

A token may expire and may be read-only (it then authenticates safe methods only).
Revoking a token deletes it; the audit trail keeps who created and revoked which token.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

PREFIX = "mqc_"


def hash_api_token(token: str) -> str:
    """Stored form of an API token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class ApiToken(models.Model):
    """A REST API token of one user; only its SHA-256 is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=4)
    read_only = models.BooleanField(
        default=False, help_text="Authenticates GET, HEAD and OPTIONS requests only."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.user} token {self.name or '(unnamed)'} …{self.hint}"

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @classmethod
    def issue(
        cls,
        user: settings.AUTH_USER_MODEL,
        name: str = "",
        token: str | None = None,
        *,
        read_only: bool = False,
        expires_at: datetime | None = None,
    ) -> str:
        """Create a token for ``user`` and return it (the only time it is visible)."""
        return cls.create(user, name, token, read_only=read_only, expires_at=expires_at)[1]

    @classmethod
    def create(
        cls,
        user: settings.AUTH_USER_MODEL,
        name: str = "",
        token: str | None = None,
        *,
        read_only: bool = False,
        expires_at: datetime | None = None,
    ) -> tuple[ApiToken, str]:
        """The stored token and its secret (the only time it is visible)."""
        token = token or f"{PREFIX}{secrets.token_urlsafe(32)}"
        row = cls.objects.create(
            user=user,
            name=name,
            token_hash=hash_api_token(token),
            hint=token[-4:],
            read_only=read_only,
            expires_at=expires_at,
        )
        return row, token
