"""ASGI entry point of the web process (daphne): the console, the REST API, health and
metrics through Django's full stack, and VibeMQ over WebSocket through Channels.

HTTP-MQ is not served here: it is a service of its own (``manage.py runproxy``,
``proxy.httpmq``), which relays its console-token endpoints to ``/api/v1/httpmq/``.

No API path is ever answered with an HTML page: errors raised before the middleware runs
(a body that is not valid UTF-8 form data, one over the size limit) get the API's JSON
error body too — or, under ``/api/v1/httpmq/``, the HTTP-MQ envelope
(:mod:`mqcloud.json_errors`).

Under daphne, Twisted would parse every ``multipart/form-data`` POST body into request
arguments that daphne never reads, and answer one it cannot parse with a bare 400 (no
body, no content type) before Django sees it; :func:`leave_bodies_to_django` turns that
parsing off, so Django decides about every body and API paths answer JSON.
"""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")

get_asgi_application()  # sets Django up before the imports below


def leave_bodies_to_django() -> None:
    """Create daphne's requests with Twisted's form parsing off (``parsePOSTFormSubmission``).

    daphne hands the raw body to the application and never uses the arguments Twisted
    parses; Twisted's multipart parser only costs memory, and a body it refuses (an empty
    or malformed multipart message, a non-ASCII field name) gets its bodyless 400.
    """
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:  # served by another ASGI server
        return
    if getattr(WebRequest, "_mqcloud_bodies_to_django", False):
        return
    init = WebRequest.__init__

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("parsePOSTFormSubmission", False)
        init(self, *args, **kwargs)

    WebRequest.__init__ = __init__
    WebRequest._mqcloud_bodies_to_django = True


leave_bodies_to_django()

from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from mqcloud.json_errors import API_PREFIX, error_response  # noqa: E402


class ConsoleASGIHandler(ASGIHandler):
    """Django's ASGI handler; a request it cannot even build answers JSON on API paths."""

    def create_request(self, scope, body_file):
        request, error = super().create_request(scope, body_file)
        path = scope.get("path", "")
        if error is not None and path.startswith(API_PREFIX):
            message = "Request body too large." if error.status_code == 413 else "Bad request."
            error = error_response(path, error.status_code, message)
        return request, error


django_application = ConsoleASGIHandler()

from channels.routing import URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from proxy.vibemq_ws import VibeMQConsumer  # noqa: E402

websocket_application = URLRouter([path("ws/vibemq", VibeMQConsumer.as_asgi())])

application = ProtocolTypeRouter({"http": django_application, "websocket": websocket_application})
