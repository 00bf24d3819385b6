"""API paths never answer with an HTML error page, Django's debug page included.

:class:`JsonErrorsMiddleware` sits outermost in ``MIDDLEWARE``: for paths under ``/api/``
every error answer that is not already JSON (an unknown URL, a method the view does not
take, a malformed ``Host``, an exception turned into Django's — or, with ``DEBUG`` on, its
debug — page) is replaced by the API's error body, whatever ``DEBUG`` says. A URL that
only lacks its trailing slash is answered 404 with the URL to use, instead of Django's
redirect (which loses a POST body) or its ``DEBUG`` RuntimeError.

Under ``/api/v1/httpmq/`` (HTTP-MQ's console-token endpoints, which the HTTP-MQ service
relays here) the error body is the HTTP-MQ envelope instead, as every HTTP-MQ answer is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve

from proxy.httpmq.envelope import envelope

log = logging.getLogger(__name__)

API_PREFIX = "/api/"
HTTPMQ_PREFIX = "/api/v1/httpmq/"
ERROR_CODES = {
    400: "invalid",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "too_large",
    415: "unsupported_media_type",
    429: "throttled",
    503: "unavailable",
}


def error_body(status: int, message: str) -> dict[str, str]:
    """The API error body for an HTTP status."""
    code = ERROR_CODES.get(status, "server_error" if status >= 500 else "error")
    return {"error": code, "message": message}


HTTPMQ_ERROR_CODES = {
    400: "BAD_PARAMETER",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "BAD_PARAMETER",
    413: "MESSAGE_TOO_LARGE",
}


def json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse(error_body(status, message), status=status)


def httpmq_error(status: int, message: str) -> HttpResponse:
    """The HTTP-MQ envelope for an HTTP error status (http-mq.md §1)."""
    if status == 503:  # the store is unavailable (http-mq.md §1): retry
        reply = envelope(503, message=message, error="UNAVAILABLE")
    elif status >= 500:
        reply = envelope(500, message=message, error="INTERNAL_ERROR")
    else:
        reply = envelope(status, message=message, error=HTTPMQ_ERROR_CODES.get(status, "ERROR"))
    response = HttpResponse(reply.body, status=reply.status)
    for name, value in reply.headers:
        response[name.decode("latin-1")] = value.decode("latin-1")
    return response


def error_response(path: str, status: int, message: str) -> HttpResponse:
    """The error answer of an API path: the envelope under HTTP-MQ's, else the API's body."""
    if path.startswith(HTTPMQ_PREFIX):
        return httpmq_error(status, message)
    return json_error(status, message)


def _is_json(response: HttpResponse) -> bool:
    return "json" in response.get("Content-Type", "")


def _resolves(path: str) -> bool:
    try:
        resolve(path)
    except Resolver404:
        return False
    return True


def _message(status: int) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    if status == 404:
        return "No such API endpoint."
    if status == 400:
        return "Bad request (a malformed Host header or request line)."
    if status >= 500:
        return "The server failed; the error is logged."
    return f"{phrase}."


class JsonErrorsMiddleware:
    """Turn every non-JSON error answer on an API path into the API's error body."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if not path.startswith(API_PREFIX):
            return self.get_response(request)
        if settings.APPEND_SLASH and not path.endswith("/") and not _resolves(path):
            if _resolves(path + "/"):
                return error_response(
                    path, 404, f"No such API endpoint; the URL ends with a slash: {path}/"
                )
            return error_response(path, 404, _message(404))
        response = self.get_response(request)
        if response.status_code < 400 or _is_json(response):
            return response
        if response.status_code >= 500:
            log.error("API %s %s answered %s", request.method, path, response.status_code)
        replaced = error_response(path, response.status_code, _message(response.status_code))
        if response.has_header("Allow"):
            replaced["Allow"] = response["Allow"]
        return replaced
