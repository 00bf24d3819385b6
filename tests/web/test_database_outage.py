"""The console and the API while PostgreSQL does not answer: 503 with Retry-After (JSON on
API paths), not a 500; /healthz says which part is down; the next request after the
outage is served again."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client

from brokers.models import Team
from tests import factories
from tests.scripts_path import free_port


@contextlib.contextmanager
def _database_down() -> Iterator[None]:
    """Point the connection at a port nothing listens on: every query fails to connect."""
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = str(free_port())
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port


@pytest.mark.django_db(transaction=True)
def test_a_database_outage_answers_503_and_passes(settings):
    settings.DEBUG = False
    Team.objects.create(name="t1")
    user = factories.user("root", admin=True)
    console = Client(raise_request_exception=False)
    console.force_login(user)
    api = Client(
        raise_request_exception=False,
        HTTP_AUTHORIZATION=f"Bearer {factories.token_for(user)}",
    )
    with _database_down():
        page = console.get("/apps/")
        assert page.status_code == 503
        assert page["Retry-After"] == "10"
        assert page["Content-Type"].startswith("text/html")
        assert b"catalog database is unavailable" in page.content

        listed = api.get("/api/v1/teams/")
        assert listed.status_code == 503
        assert listed["Retry-After"] == "10"
        assert listed.json() == {
            "error": "unavailable",
            "message": "The catalog database is unavailable; try again in a few seconds.",
        }

        relayed = api.get("/api/v1/httpmq/config/app.topic")  # HTTP-MQ's envelope
        assert relayed.status_code == 503
        assert relayed.json()["error"] == "UNAVAILABLE"
        assert relayed.json()["status"] == 503

        health = console.get("/healthz")
        assert health.status_code == 503
        assert health.json()["postgres"] == "OperationalError"

    assert console.get("/apps/").status_code == 200
    assert api.get("/api/v1/teams/").status_code == 200
