"""A local HTTP service that records the JSON POSTed to it and answers a status the test
sets: the alert webhook and SMS gateway of the alert tests."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer


class HttpSink:
    """What was posted (``sent``: the bodies; ``paths``, ``auth``: each post's path and
    Authorization header) and what it answers (``status``)."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.sent: list[dict] = []
        self.paths: list[str] = []
        self.auth: list[str | None] = []
        self.url = ""


@contextlib.contextmanager
def http_sink(status: int = 200) -> Iterator[HttpSink]:
    """An :class:`HttpSink` listening on a free loopback port (``sink.url``) until the
    block ends."""
    sink = HttpSink(status)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            sink.sent.append(json.loads(self.rfile.read(length)))
            sink.paths.append(self.path)
            sink.auth.append(self.headers.get("Authorization"))
            self.send_response(sink.status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sink.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield sink
    finally:
        server.shutdown()
        server.server_close()
