"""ASGI entry point of the web process (daphne).

HTTP-MQ (``/mq/…``) is token-authenticated, CSRF-exempt and sessionless, so it is served
by a Django handler without the middleware stack: each sync middleware costs two thread
hops per request, which dominated the proxy's latency. Everything else (console, API,
admin) goes through the full stack. WebSockets are routed by Channels.

Neither handler ever answers an API or HTTP-MQ path with an HTML page: errors raised
before the middleware runs (a body that is not valid UTF-8 form data, one over the size
limit) get the API's JSON error body or the HTTP-MQ envelope too.
"""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")

get_asgi_application()  # sets Django up before the imports below

from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from mqcloud.json_errors import API_PREFIX, json_error  # noqa: E402
from proxy.errors import envelope_errors, error_envelope  # noqa: E402

MQ_PREFIX = "/mq/"


class ConsoleASGIHandler(ASGIHandler):
    """Django's ASGI handler; a request it cannot even build answers JSON on API paths."""

    def create_request(self, scope, body_file):
        request, error = super().create_request(scope, body_file)
        if error is not None and scope.get("path", "").startswith(API_PREFIX):
            message = "Request body too large." if error.status_code == 413 else "Bad request."
            error = json_error(error.status_code, message)
        return request, error


class BareASGIHandler(ASGIHandler):
    """Django's ASGI handler with URL routing and views but no middleware; every error it
    answers is an HTTP-MQ envelope (never Django's HTML or debug pages)."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=True)
        self._middleware_chain = envelope_errors(self._get_response_async)

    def create_request(self, scope, body_file):
        request, error = super().create_request(scope, body_file)
        return request, (error_envelope(error.status_code) if error is not None else None)

    async def __call__(self, scope, receive, send) -> None:
        """Django's entry point without its per-request ThreadSensitiveContext.

        That context gave every request its own executor thread for the sync receivers of
        request_started/request_finished, created and joined per request — most of the
        proxy's cost per request. HTTP-MQ views are async and never touch the database,
        so those receivers can share asgiref's one sync thread.
        """
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)


django_application = ConsoleASGIHandler()
mq_application = BareASGIHandler()


async def http_application(scope, receive, send) -> None:
    """Send HTTP-MQ paths to the bare handler and the rest to the full Django stack."""
    app = mq_application if scope.get("path", "").startswith(MQ_PREFIX) else django_application
    await app(scope, receive, send)


from channels.routing import URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from proxy.vibemq_ws import VibeMQConsumer  # noqa: E402

websocket_application = URLRouter([path("ws/vibemq", VibeMQConsumer.as_asgi())])

application = ProtocolTypeRouter({"http": http_application, "websocket": websocket_application})
