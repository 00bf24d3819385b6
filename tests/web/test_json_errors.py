"""API paths answer every error with JSON (HTTP-MQ's console-token endpoints with the
envelope), whatever DEBUG says; anonymous API calls get 401; deletes that dependents block
get 409; NUL characters get 400."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from brokers.models import Team
from mqcloud.api import httpmq, views
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture(params=[True, False], ids=["debug", "no-debug"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


@pytest.fixture
def admin_api() -> APIClient:
    client = APIClient(raise_request_exception=False)
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {factories.token_for(factories.user('root', admin=True))}"
    )
    return client


def assert_envelope(response, status: int, error: str) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["error"] == error and body["message"]
    return body


def test_unknown_api_url_is_json_404(client, debug):
    assert_envelope(client.get("/api/v1/no-such-thing/"), 404, "not_found")


def test_missing_slash_is_json_404_naming_the_url(admin_api, debug):
    body = assert_envelope(admin_api.post("/api/v1/topics", {}, format="json"), 404, "not_found")
    assert "/api/v1/topics/" in body["message"]
    assert_envelope(admin_api.get("/api/v1/clusters"), 404, "not_found")


def test_bad_host_is_json_400(client, debug):
    response = client.get("/api/v1/clusters/", HTTP_HOST="evil.example:bad port")
    assert_envelope(response, 400, "invalid")


def test_unhandled_exception_is_json_500(admin_api, debug, monkeypatch):
    def explode(self, request, *args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(views.ClusterViewSet, "list", explode)
    body = assert_envelope(admin_api.get("/api/v1/clusters/"), 500, "server_error")
    assert "boom" not in body["message"]


def test_method_not_allowed_is_json(admin_api, debug):
    assert_envelope(admin_api.delete("/api/v1/teams/"), 405, "method_not_allowed")


@pytest.mark.parametrize("url", ["/api/v1/clusters/", "/api/v1/brokers/1/", "/api/v1/teams/"])
def test_anonymous_gets_401(client, url):
    factories.cluster_with_brokers()
    assert_envelope(client.get(url), 401, "not_authenticated")


def test_delete_with_dependents_is_409_with_the_reason(admin_api):
    cluster = factories.cluster_with_brokers("busy")
    factories.topic("orders", cluster, Team.objects.create(name="red"))
    body = assert_envelope(admin_api.delete(f"/api/v1/clusters/{cluster.pk}/"), 409, "conflict")
    assert "orders" in body["message"] or "topic" in body["message"]
    body = assert_envelope(admin_api.delete("/api/v1/brokers/1/"), 409, "conflict")
    assert "depend" in body["message"]


def test_nul_characters_are_400(admin_api):
    Team.objects.create(name="red")
    response = admin_api.post("/api/v1/apps/", {"code": "shop", "team": "r\x00ed"}, format="json")
    assert_envelope(response, 400, "invalid")
    assert_envelope(admin_api.get("/api/v1/topics/?search=a%00b"), 400, "invalid")


def test_httpmq_console_endpoint_errors_are_envelopes(admin_api, debug, monkeypatch):
    """HTTP-MQ's console-token endpoints (``/api/v1/httpmq/``, relayed by the HTTP-MQ
    service, whose own errors tests/httpmq/test_service.py covers) answer even the errors
    no endpoint describes with the envelope, never the API's body or an HTML page."""

    def explode(user, name):
        raise RuntimeError("boom")

    monkeypatch.setattr(httpmq, "_managed_policy", explode)
    response = admin_api.get("/api/v1/httpmq/config/shop.orders")
    assert response.status_code == 500
    assert response.json() == {
        "status": 500,
        "message": "The server failed; the error is logged.",
        "error": "INTERNAL_ERROR",
    }
    response = admin_api.get("/api/v1/httpmq/no-such-endpoint")
    assert response.status_code == 404
    assert response.json()["error"] == "NOT_FOUND" and response.json()["status"] == 404
    response = admin_api.get("/api/v1/httpmq/unregister", HTTP_HOST="evil.example:bad port")
    assert response.status_code == 400
    assert response.json()["error"] == "BAD_PARAMETER"
