"""``manage.py runproxy``: serve HTTP-MQ (``/mq/…``) on its own port.

Reads the service's settings from the environment (``HTTPMQ_*``, README "Configuration")
and Redis from ``REDIS_URL``; the options below override them. The service itself
(:mod:`proxy.httpmq`) uses neither Django nor the database: the console-token endpoints
are relayed to the web process (``HTTPMQ_CONSOLE_URL``).
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from proxy.httpmq.config import ProxyConfig
from proxy.httpmq.server import serve


class Command(BaseCommand):
    help = "Serve HTTP-MQ on HTTPMQ_PORT (default 8081) with one process per core."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=None, help="Address to listen on (HTTPMQ_BIND_HOST).")
        parser.add_argument("--port", type=int, default=None, help="Port (HTTPMQ_PORT, 8081).")
        parser.add_argument(
            "--processes",
            type=int,
            default=None,
            help="Serving processes sharing the port (HTTPMQ_PROCESSES; default: one per core).",
        )

    def handle(self, *args: object, **options: object) -> None:
        config = ProxyConfig.from_env(
            redis_url=settings.REDIS_URL,
            host=options.get("host"),
            port=options.get("port"),
            processes=options.get("processes"),
        )
        self.stdout.write(
            f"HTTP-MQ: http://{config.host}:{config.port}/mq/ "
            f"({config.process_count()} processes; console-token endpoints via "
            f"{config.console_url})"
        )
        self.stdout.flush()
        serve(config)
