"""schemathesis hooks of the live run (``SCHEMATHESIS_HOOKS``): the run's API token.

The run may revoke the very token it authenticates with (``DELETE /api/v1/api-tokens/{id}/``
with the token's own id is a valid call), and every later call would then test nothing but
the 401. This auth provider gets a token the way a user does — signs in to the console and
creates one with ``POST /api/v1/api-tokens/`` — and schemathesis asks it again, and replays
the call, whenever an answer is 401 (its reactive re-authentication; the summary counts
them). The console session is out of the run's reach: no API operation ends it.

Settings come from the environment: ``MQCLOUD_ST_BASE`` (the web process),
``MQCLOUD_ST_USER`` and ``MQCLOUD_ST_PASSWORD``.
"""

from __future__ import annotations

import os

import httpx
import schemathesis
from schemathesis import AuthContext, Case

TOKEN_REUSE_SECONDS = 3600  # seconds a token is reused unless an answer says it stopped working


@schemathesis.auth(refresh_interval=TOKEN_REUSE_SECONDS)
class ConsoleIssuedToken:
    """A personal API token created through a console session."""

    def get(self, case: Case, context: AuthContext) -> str:
        base = os.environ["MQCLOUD_ST_BASE"]
        with httpx.Client(base_url=base, timeout=30) as client:
            client.get("/login/").raise_for_status()
            signed_in = client.post(
                "/login/",
                data={
                    "username": os.environ["MQCLOUD_ST_USER"],
                    "password": os.environ["MQCLOUD_ST_PASSWORD"],
                    "csrfmiddlewaretoken": client.cookies["csrftoken"],
                },
                headers={"Referer": f"{base}/login/"},
            )
            if signed_in.status_code != 302:
                raise RuntimeError(f"console sign-in answered {signed_in.status_code}")
            created = client.post(
                "/api/v1/api-tokens/",
                json={"name": "schemathesis"},
                headers={"X-CSRFToken": client.cookies["csrftoken"], "Referer": f"{base}/"},
            )
            created.raise_for_status()
            return str(created.json()["token"])

    def set(self, case: Case, data: str, context: AuthContext) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}
