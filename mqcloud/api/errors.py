"""One JSON error body for every failed API call: what went wrong and in which field.

``{"error": "<code>", "message": "<text>", "fields": {"<field>": ["<problem>", …]}}`` —
``fields`` appears for validation errors and unique clashes. :class:`ApiErrorSerializer`
documents the body in the OpenAPI schema, and :func:`error_responses` declares it for an
operation's error status codes. :func:`exception_handler` answers every exception a view raises with
it — Django's ``ProtectedError`` as 409 with the dependents that block a delete, database
errors on input PostgreSQL refuses as 400, a value another object already holds (a unique
check of the serializer or the model) as 409 with the field that clashes, anything
unexpected as a logged 500 — so no API call ever gets an HTML page.
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, IntegrityError
from django.db.models import ProtectedError, RestrictedError
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from mqcloud.outage import MESSAGE as OUTAGE_MESSAGE
from mqcloud.outage import RETRY_AFTER_S, database_unavailable

log = logging.getLogger(__name__)

MAX_NAMED_DEPENDENTS = 5
# Validation error codes of a value another object holds (DRF's UniqueValidator, Django's
# validate_unique and unique constraints): the request is well-formed, the state clashes.
UNIQUE_CODES = frozenset({"unique", "unique_together"})


class Conflict(exceptions.APIException):
    """The request conflicts with the current state (e.g. a delete that dependents block)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state."
    default_code = "conflict"


class EngineUnavailableError(exceptions.APIException):
    """The message store did not answer (503)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The message store did not answer."
    default_code = "engine_unavailable"


def blocked_delete_message(exc: ProtectedError | RestrictedError) -> str:
    """Which objects keep the delete from happening, in one sentence."""
    objects = list(
        exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects
    )
    kinds = sorted({str(obj._meta.verbose_name_plural) for obj in objects})
    named = ", ".join(str(obj) for obj in objects[:MAX_NAMED_DEPENDENTS])
    more = (
        f" and {len(objects) - MAX_NAMED_DEPENDENTS} more"
        if len(objects) > MAX_NAMED_DEPENDENTS
        else ""
    )
    return f"Cannot delete: {len(objects)} dependent {' and '.join(kinds)} ({named}{more}) refer to it; remove them first."


def _as_api_exception(exc: Exception) -> Exception:
    """Django and database exceptions a view may raise, as the API exception they mean."""
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, Http404):  # get_object_or_404: the body says not_found, like DRF's
        return exceptions.NotFound(str(exc) or None)
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, ProtectedError | RestrictedError):
        return Conflict(blocked_delete_message(exc))
    if isinstance(exc, IntegrityError):
        return Conflict("The change conflicts with existing data (a unique or related value).")
    if isinstance(exc, DataError):
        return exceptions.ValidationError(
            {"non_field_errors": ["A value is not storable (a NUL character, or out of range)."]}
        )
    return exc


def exception_handler(exc: Exception, context: dict) -> Response:
    """DRF exception handler producing the mqcloud error body for every exception."""
    if database_unavailable(exc):  # an outage, not a bug: retry (mqcloud.outage)
        log.warning("API call while the database is unavailable: %s", type(exc).__name__)
        return Response(
            {"error": "unavailable", "message": OUTAGE_MESSAGE},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    exc = _as_api_exception(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        view = context.get("view")
        log.exception("API error in %s", type(view).__name__ if view else "?", exc_info=exc)
        return Response(
            {"error": "server_error", "message": "The server failed; the error is logged."},
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail
        fields = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        fields = {k: _strings(v) for k, v in fields.items()}
        first = next(iter(fields.items()), ("", [""]))
        message = f"{first[0]}: {first[1][0]}" if first[0] != "non_field_errors" else first[1][0]
        clash = _leaf_codes(exc.get_codes()) <= UNIQUE_CODES
        response.data = {"error": "conflict" if clash else "invalid", "message": message}
        response.data["fields"] = fields
        response.status_code = status.HTTP_409_CONFLICT if clash else status.HTTP_400_BAD_REQUEST
        return response
    code = getattr(exc, "default_code", "error")
    detail = getattr(exc, "detail", str(exc))
    response.data = {"error": str(getattr(detail, "code", code) or code), "message": str(detail)}
    return response


def _leaf_codes(codes: object) -> set[str]:
    """Every error code in DRF's nested ``get_codes()`` structure ({""} when none)."""
    if isinstance(codes, dict):
        return set().union(*(_leaf_codes(v) for v in codes.values())) or {""}
    if isinstance(codes, list):
        return set().union(*(_leaf_codes(v) for v in codes)) or {""}
    return {str(codes)}


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
        help_text="What failed: invalid, not_authenticated, permission_denied, not_found,"
        " conflict, throttled, server_error, …"
    )
    message = serializers.CharField(help_text="What went wrong, in one sentence.")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Validation errors and unique clashes (409) only: the problems of each field.",
    )


ERROR_DESCRIPTIONS = {
    400: "Invalid input; `fields` names each field's problems.",
    401: "No valid API token (or console session).",
    403: "The caller's role (or a read-only token) does not allow this.",
    404: "No such object among those the caller may see.",
    405: "The operation does not take this method.",
    409: "The request conflicts with the current state: dependents block a delete, or a"
    " unique value (a name, code or id) is already taken (`fields` names it).",
    415: "The body is not JSON (`Content-Type: application/json`).",
    429: "Too many requests of this kind in a while: `message` says when to try again.",
    503: "The message store did not answer.",
}


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """OpenAPI responses for the error status codes an operation answers."""
    return {
        code: OpenApiResponse(ApiErrorSerializer, description=ERROR_DESCRIPTIONS[code])
        for code in codes
    }
