"""Token authentication for the REST API: ``Authorization: Bearer <t>`` or ``Token <t>``.

Tokens are personal (:mod:`mqcloud.api.tokens`): looked up by their hash, refused once
expired or revoked (deleted) or when their user is deactivated. A read-only token
authenticates GET, HEAD and OPTIONS only; anything else with it answers 403.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from mqcloud.api.models import ApiToken, hash_api_token

LAST_USED_PRECISION = timedelta(seconds=60)  # at most one write per token and minute


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """Looks the token's hash up; tokens are never stored or logged in clear."""

    keywords = ("token", "bearer")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode("latin-1") not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Authorization header must be '<scheme> <token>'."
            )
        try:
            token = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Token contains invalid characters.") from None
        found = (
            ApiToken.objects.select_related("user").filter(token_hash=hash_api_token(token)).first()
        )
        if found is None or not found.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        if found.expired:
            raise exceptions.AuthenticationFailed("The token has expired.")
        if found.read_only and request.method not in permissions.SAFE_METHODS:
            raise exceptions.PermissionDenied("This API token is read-only.")
        now = timezone.now()
        if found.last_used_at is None or now - found.last_used_at >= LAST_USED_PRECISION:
            ApiToken.objects.filter(pk=found.pk).update(last_used_at=now)
        return found.user, found

    def authenticate_header(self, request) -> str:
        return "Bearer"


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Describes ApiTokenAuthentication in the OpenAPI schema as an HTTP bearer scheme."""

    target_class = "mqcloud.api.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "Personal API token: `Authorization: Bearer <token>` (or `Token <token>`)."
                " Create one in the console under API tokens (`/tokens/`); it is shown once."
            ),
        }
