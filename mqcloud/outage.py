"""The web process's answer when an error reaches Django's handler (``handler500``).

A request that fails because PostgreSQL does not answer (a restart, a failover, a cut
network) is not a bug of the request: it gets **503 Service Unavailable** with
``Retry-After``, a page saying the catalog database is unavailable (JSON under ``/api/``, the
HTTP-MQ envelope under its prefix), so that users, load balancers and API clients know to
retry. Any other error keeps Django's 500 answer.
"""

from __future__ import annotations

import logging
import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.views import defaults

from mqcloud.json_errors import API_PREFIX, error_response

log = logging.getLogger(__name__)

RETRY_AFTER_S = 10
MESSAGE = "The catalog database is unavailable; try again in a few seconds."
PAGE = (
    "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
    "<title>Unavailable</title></head><body><h1>Temporarily unavailable</h1>"
    f"<p>{MESSAGE}</p><p>Brokers keep serving producers and consumers meanwhile.</p>"
    "</body></html>"
)


def database_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the database could not be reached or its connection broke."""
    return isinstance(exc, OperationalError | InterfaceError)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: 503 with ``Retry-After`` for a database outage, else Django's 500."""
    if not database_unavailable(sys.exc_info()[1]):
        return defaults.server_error(request)
    log.warning("%s %s: the database is unavailable", request.method, request.path)
    if request.path_info.startswith(API_PREFIX):
        response = error_response(request.path_info, 503, MESSAGE)
    else:
        response = HttpResponse(PAGE, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response
