"""ASGI entry point of the web process (daphne): HTTP through Django, WebSockets via Channels."""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")

django_application = get_asgi_application()

application = ProtocolTypeRouter({"http": django_application})
