"""API paths never answer with an HTML error page, Django's debug page included.

:class:`JsonErrorsMiddleware` sits outermost in ``MIDDLEWARE``: for paths under ``/api/``
every error answer that is not already JSON (an unknown URL, a method the view does not
take, a malformed ``Host``, an exception turned into Django's — or, with ``DEBUG`` on, its
debug — page) is replaced by the API's error body, whatever ``DEBUG`` says. A URL that
only lacks its trailing slash is answered 404 with the URL to use, instead of Django's
redirect (which loses a POST body) or its ``DEBUG`` RuntimeError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve

log = logging.getLogger(__name__)

API_PREFIX = "/api/"
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
}


def error_body(status: int, message: str) -> dict[str, str]:
    """The API error body for an HTTP status."""
    code = ERROR_CODES.get(status, "server_error" if status >= 500 else "error")
    return {"error": code, "message": message}


def json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse(error_body(status, message), status=status)


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
                return json_error(404, f"No such API endpoint; the URL ends with a slash: {path}/")
            return json_error(404, _message(404))
        response = self.get_response(request)
        if response.status_code < 400 or _is_json(response):
            return response
        if response.status_code >= 500:
            log.error("API %s %s answered %s", request.method, path, response.status_code)
        replaced = json_error(response.status_code, _message(response.status_code))
        if response.has_header("Allow"):
            replaced["Allow"] = response["Allow"]
        return replaced
