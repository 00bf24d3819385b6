"""One JSON error body for every failed API call: what went wrong and in which field.

``{"error": "<code>", "message": "<text>", "fields": {"<field>": ["<problem>", …]}}`` —
``fields`` appears for validation errors only. :class:`ApiErrorSerializer` documents the
body in the OpenAPI schema, and :func:`error_responses` declares it for an operation's
error status codes.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF exception handler producing the mqcloud error body."""
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(as_serializer_error(exc))
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail
        fields = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        fields = {k: _strings(v) for k, v in fields.items()}
        first = next(iter(fields.items()), ("", [""]))
        message = f"{first[0]}: {first[1][0]}" if first[0] != "non_field_errors" else first[1][0]
        response.data = {"error": "invalid", "message": message, "fields": fields}
        response.status_code = status.HTTP_400_BAD_REQUEST
        return response
    code = getattr(exc, "default_code", "error")
    detail = getattr(exc, "detail", str(exc))
    response.data = {"error": str(getattr(detail, "code", code) or code), "message": str(detail)}
    return response


def _strings(value: object) -> list[str]:
    if isinstance(value, list):
        out: list[str] = []
        for item in value:
            out.extend(_strings(item))
        return out
    if isinstance(value, dict):
        return [f"{k}: {m}" for k, v in value.items() for m in _strings(v)]
    return [str(value)]


class ApiErrorSerializer(serializers.Serializer):
    """The body of every failed API call."""

    # For the schema only: exception_handler builds the body.
    error = serializers.CharField(
        help_text="What failed: invalid, not_authenticated, permission_denied, not_found, …"
    )
    message = serializers.CharField(help_text="What went wrong, in one sentence.")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Validation errors only: the problems of each field.",
    )


ERROR_DESCRIPTIONS = {
    400: "Invalid input; `fields` names each field's problems.",
    401: "No valid API token.",
    403: "The caller's role does not allow this.",
    404: "No such object among those the caller may see.",
}


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """OpenAPI responses for the error status codes an operation answers."""
    return {
        code: OpenApiResponse(ApiErrorSerializer, description=ERROR_DESCRIPTIONS[code])
        for code in codes
    }
