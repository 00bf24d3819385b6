"""Token authentication for the REST API: ``Authorization: Token <t>`` or ``Bearer <t>``."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from mqcloud.api.models import ApiToken, hash_api_token


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
        ApiToken.objects.filter(pk=found.pk).update(last_used_at=timezone.now())
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
            "description": "API token: `Authorization: Bearer <token>` (or `Token <token>`).",
        }
