"""ASGI entry point of the web process (daphne).

HTTP-MQ (``/mq/…``) is token-authenticated, CSRF-exempt and sessionless, so it is served
by a Django handler without the middleware stack: each sync middleware costs two thread
hops per request, which dominated the proxy's latency. Everything else (console, API,
admin) goes through the full stack. WebSockets are routed by Channels.
"""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")

django_application = get_asgi_application()

from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.exception import convert_exception_to_response  # noqa: E402

MQ_PREFIX = "/mq/"


class BareASGIHandler(ASGIHandler):
    """Django's ASGI handler with URL routing and views but no middleware."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=True)
        self._middleware_chain = convert_exception_to_response(self._get_response_async)

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
