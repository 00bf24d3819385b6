"""Console page: publish to a VibeMQ queue and watch deliveries live over WebSocket."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

WS_PATH = "/ws/vibemq"


@login_required
def vibemq_live(request: HttpRequest) -> HttpResponse:
    """The page; the browser talks to ``/ws/vibemq`` with an app token the user enters."""
    return render(request, "console/vibemq.html", {"ws_path": WS_PATH})
