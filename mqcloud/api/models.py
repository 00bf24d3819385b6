"""API tokens of console users: hashed at rest, shown once when issued."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models


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
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.user} token …{self.hint}"

    @classmethod
    def issue(cls, user: settings.AUTH_USER_MODEL, name: str = "", token: str | None = None) -> str:
        """Create a token for ``user`` and return it (the only time it is visible)."""
        token = token or f"mqc_{secrets.token_urlsafe(32)}"
        cls.objects.create(user=user, name=name, token_hash=hash_api_token(token), hint=token[-4:])
        return token
