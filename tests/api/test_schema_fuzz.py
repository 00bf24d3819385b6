"""schemathesis against /api/schema/: generated calls to every operation, no 5xx.

schemathesis' pytest plugin does not run under pytest 9 yet, so the test drives its Python
API directly: one Hypothesis run per operation of the live schema.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings

from brokers.models import Team
from tests import factories

EXAMPLES_PER_OPERATION = 12  # ~40 operations → several hundred generated calls


@pytest.fixture
def keep_test_connection():
    """Calls go straight to the WSGI app: keep it from closing the test's DB connection."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.mark.django_db
def test_api_never_answers_5xx(keep_test_connection):
    team = Team.objects.create(name="fuzz")
    cluster = factories.cluster_with_brokers("fuzz-cluster")
    factories.topic("fuzz-topic", cluster, team)
    factories.app("fuzz-app", team)
    headers = {"Authorization": f"Bearer {factories.token_for(factories.user('fz', admin=True))}"}
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30
    calls = 0
    server_errors: list[str] = []

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def call(case) -> None:
            nonlocal calls
            response = case.call(headers=headers)
            calls += 1
            if response.status_code >= 500:
                server_errors.append(
                    f"{case.method} {case.formatted_path} → {response.status_code}"
                    f" {response.text[:300]}"
                )

        call()

    assert calls >= 300
    assert not server_errors, "\n".join(server_errors[:20])
