"""ASGI entry point of the web process (daphne): the console, the REST API, health and
metrics through Django's full stack, and VibeMQ over WebSocket through Channels.

HTTP-MQ is not served here: it is a service of its own (``manage.py runproxy``,
``proxy.httpmq``), which relays its console-token endpoints to ``/api/v1/httpmq/``.
"""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")

django_application = get_asgi_application()

from channels.routing import URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from proxy.vibemq_ws import VibeMQConsumer  # noqa: E402

websocket_application = URLRouter([path("ws/vibemq", VibeMQConsumer.as_asgi())])

application = ProtocolTypeRouter({"http": django_application, "websocket": websocket_application})
