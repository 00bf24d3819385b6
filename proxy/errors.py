"""HTTP-MQ paths answer every error with the envelope, never an HTML (or debug) page.

The endpoints themselves answer their failures with the envelope (:mod:`proxy.views`);
:func:`envelope_errors` wraps the handler chain that serves ``/mq/`` so that what happens
before or around a view — an unknown path (Django's 404, with ``DEBUG`` on its debug
page), a view's plain 405, an exception no view caught, a malformed request — gets the
envelope too, whatever ``DEBUG`` says.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse

from proxy.envelope import envelope

log = logging.getLogger("mqcloud.httpmq")

ERRORS = {
    400: "BAD_PARAMETER",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "BAD_PARAMETER",
    413: "MESSAGE_TOO_LARGE",
}
MESSAGES = {
    400: "bad request",
    403: "forbidden",
    404: "no such HTTP-MQ endpoint",
    405: "method not allowed",
    413: "request body too large",
}

GetResponse = Callable[[HttpRequest], Awaitable[HttpResponse]]


def error_envelope(status: int) -> HttpResponse:
    """The envelope of an HTTP error status that no endpoint described itself."""
    if status >= 500:
        return envelope(500, message="internal error", error="INTERNAL_ERROR")
    return envelope(
        status, message=MESSAGES.get(status, "request failed"), error=ERRORS.get(status, "ERROR")
    )


def envelope_errors(get_response: GetResponse) -> GetResponse:
    """``get_response`` whose exceptions and non-JSON error answers become envelopes."""

    async def handle(request: HttpRequest) -> HttpResponse:
        try:
            response = await get_response(request)
        except Http404:
            return error_envelope(404)
        except PermissionDenied:
            return error_envelope(403)
        except (SuspiciousOperation, BadRequest):
            return error_envelope(400)
        except Exception:
            log.exception("HTTP-MQ %s failed outside its endpoint", request.path)
            return error_envelope(500)
        if response.status_code >= 400 and "json" not in response.get("Content-Type", ""):
            return error_envelope(response.status_code)
        return response

    return handle
