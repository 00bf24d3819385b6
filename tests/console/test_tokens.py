"""Personal API tokens in the console and the API: created (shown once), listed, used as
Bearer tokens, scoped read-only, expiring, revoked by their owner or an admin, audited."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from mqcloud.api.models import ApiToken, hash_api_token
from mqcloud.approvals.models import AuditEvent

pytestmark = pytest.mark.django_db


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def create_in_console(client, **fields) -> str:
    response = client.post("/tokens/", {"name": "weekly-report", **fields})
    assert response.status_code == 201, response.content[:500]
    assert response["Cache-Control"] == "no-store"
    return response.context["secret"]


def test_console_creates_a_token_shown_once_and_stored_hashed(client, world):
    client.force_login(world.alice)
    secret = create_in_console(client)
    token = ApiToken.objects.get(user=world.alice)
    assert token.token_hash == hash_api_token(secret) and secret.endswith(token.hint)
    assert secret not in client.get("/tokens/").content.decode()
    page = client.get("/tokens/").content.decode()
    assert "weekly-report" in page and f"…{token.hint}" in page and "never" in page
    assert AuditEvent.objects.filter(action="api-token-created", actor=world.alice).exists()
    assert "api-token-created" in client.get("/audit/").content.decode()


def test_the_token_lists_the_teams_consumers_and_stops_when_revoked(client, world):
    client.force_login(world.alice)
    secret = create_in_console(client)
    api = bearer(secret)
    listed = api.get("/api/v1/consumers/")
    assert listed.status_code == 200
    assert [c["name"] for c in listed.json()["results"]] == ["shop.orders"]
    assert ApiToken.objects.get(user=world.alice).last_used_at is not None
    token = ApiToken.objects.get(user=world.alice)
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 302
    assert api.get("/api/v1/consumers/").status_code == 401
    assert AuditEvent.objects.filter(action="api-token-revoked", actor=world.alice).exists()


def test_the_try_it_command_names_a_real_endpoint(client, world):
    """The page's curl example, run with the new token, lists the caller's consumers."""
    client.force_login(world.alice)
    response = client.post("/tokens/", {"name": "try-it"})
    match = re.search(
        r'curl -H "Authorization: Bearer (\S+)" http://testserver(\S+)</code>',
        response.content.decode(),
    )
    assert match, "no curl example on the page"
    secret, url = match.groups()
    listed = bearer(secret).get(url.replace("&amp;", "&"))
    assert listed.status_code == 200, listed.content[:300]
    assert [c["name"] for c in listed.json()["results"]] == ["shop.orders"]


def test_read_only_tokens_only_read(client, world):
    client.force_login(world.carol)
    api = bearer(create_in_console(client, read_only="on"))
    assert api.get("/api/v1/apps/").status_code == 200
    refused = api.post("/api/v1/apps/", {"code": "new-app", "team": "red"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["message"] == "This API token is read-only."


def test_expired_tokens_are_refused(client, world):
    client.force_login(world.alice)
    secret = create_in_console(client, expires_in="7")
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = bearer(secret).get("/api/v1/consumers/")
    assert response.status_code == 401 and "expired" in response.json()["message"]
    assert "expired" in client.get("/tokens/").content.decode()


def test_a_token_needs_a_name(client, world):
    client.force_login(world.alice)
    response = client.post("/tokens/", {"name": "  "})
    assert response.status_code == 400
    assert 'role="alert"' in response.content.decode()
    assert not ApiToken.objects.exists()


def test_others_cannot_revoke_but_admins_can(client, world):
    client.force_login(world.alice)
    secret = create_in_console(client)
    token = ApiToken.objects.get(user=world.alice)
    client.force_login(world.bob)
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    assert "weekly-report" not in client.get("/tokens/").content.decode()
    client.force_login(world.root)
    page = client.get("/tokens/").content.decode()
    assert "alice" in page and "weekly-report" in page
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 302
    assert bearer(secret).get("/api/v1/consumers/").status_code == 401
    event = AuditEvent.objects.get(action="api-token-revoked")
    assert event.actor == world.root and event.target == "user:alice"


def test_api_creates_lists_and_revokes_tokens(world):
    first = ApiToken.issue(world.alice, "bootstrap")
    api = bearer(first)
    created = api.post(
        "/api/v1/api-tokens/",
        {
            "name": "ci",
            "read_only": True,
            "expires_at": (timezone.now() + timedelta(days=1)).isoformat(),
        },
        format="json",
    )
    assert created.status_code == 201
    body = created.json()
    assert body["token"].startswith("mqc_") and body["read_only"] and body["user"] == "alice"
    listed = api.get("/api/v1/api-tokens/").json()["results"]
    assert {t["name"] for t in listed} == {"bootstrap", "ci"}
    assert all(t["token"] is None for t in listed)
    past = api.post(
        "/api/v1/api-tokens/", {"name": "x", "expires_at": "2001-01-01T00:00:00Z"}, format="json"
    )
    assert past.status_code == 400 and "expires_at" in past.json()["fields"]
    assert api.delete(f"/api/v1/api-tokens/{body['id']}/").status_code == 204
    assert bearer(body["token"]).get("/api/v1/teams/").status_code == 401
    assert api.get(f"/api/v1/api-tokens/{body['id']}/").status_code == 404
    other = ApiToken.issue(world.bob, "bob's")
    bob_id = ApiToken.objects.get(user=world.bob).pk
    assert api.delete(f"/api/v1/api-tokens/{bob_id}/").status_code == 404
    admin = bearer(ApiToken.issue(world.root, "admin"))
    assert "bob's" in {t["name"] for t in admin.get("/api/v1/api-tokens/").json()["results"]}
    assert admin.delete(f"/api/v1/api-tokens/{bob_id}/").status_code == 204
    assert bearer(other).get("/api/v1/teams/").status_code == 401
