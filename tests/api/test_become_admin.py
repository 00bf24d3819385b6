"""Becoming an admin is an application (console-features "Becoming admin is itself an
approval request"): of one of the applicant's teams, or of the platform; a platform admin
decides it, never an auto-approval rule; what it asks is checked when filed and again
when approved."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from brokers.models import Team, TeamMembership
from mqcloud.api.scoping import admin_teams, is_platform_admin
from mqcloud.approvals import services
from mqcloud.approvals.models import Application, ApprovalSettings
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    return {
        "red": red,
        "blue": blue,
        "alice": factories.user("alice", team=red),
        "carol": factories.user("carol", team=red, role="admin"),
        "loner": factories.user("loner"),
        "root": factories.user("root", admin=True),
    }


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {factories.token_for(user)}")
    return client


def apply(user, payload: object):
    return client_for(user).post(
        "/api/v1/applications/", {"kind": "become_admin", "payload": payload}, format="json"
    )


def test_a_member_becomes_its_teams_admin_once_approved(world):
    filed = apply(world["alice"], {"team": "red"})
    assert filed.status_code == 201, filed.json()
    body = filed.json()
    assert (body["status"], body["team"]) == ("pending", "red")
    assert not admin_teams(world["alice"]).filter(name="red").exists()
    again = apply(world["alice"], {"team": "red"})
    assert again.status_code == 400  # one open application per target
    approved = client_for(world["root"]).post(f"/api/v1/applications/{body['id']}/approve/")
    assert approved.json()["status"] == "approved", approved.json()
    assert approved.json()["result"] == {"user": "alice", "team_admin": "red"}
    assert admin_teams(world["alice"]).filter(name="red").exists()
    assert not is_platform_admin(world["alice"])
    assert apply(world["alice"], {"team": "red"}).status_code == 400  # admin already


@pytest.mark.parametrize(
    "payload",
    [
        {"team": "blue"},  # not a member
        {"team": "nowhere"},
        {},
        {"team": "red", "platform": True},
        {"platform": False},
        {"platform": "yes"},
        {"team": 7},
        {"team": "red", "role": "root"},
        ["red"],
    ],
)
def test_what_may_not_be_asked_is_refused_when_filed(world, payload):
    response = apply(world["alice"], payload)
    assert response.status_code == 400, response.json()
    assert not Application.objects.exists()


def test_a_platform_admin_by_application(world):
    assert apply(world["carol"], {"team": "red"}).status_code == 400  # admin already
    assert apply(world["loner"], {"platform": True}).status_code == 400  # no team yet
    filed = apply(world["carol"], {"platform": True}).json()
    assert filed["status"] == "pending"
    client_for(world["root"]).post(f"/api/v1/applications/{filed['id']}/approve/")
    world["carol"].refresh_from_db()
    assert is_platform_admin(world["carol"])
    assert apply(world["root"], {"platform": True}).status_code == 400


def test_it_is_never_approved_automatically(world):
    root = client_for(world["root"])
    refused = root.patch(
        "/api/v1/approval-settings/", {"auto_approve": ["become_admin"]}, format="json"
    )
    assert refused.status_code == 400
    ApprovalSettings.objects.update_or_create(id=1, defaults={"auto_approve": ["become_admin"]})
    application = services.submit(world["alice"], "become_admin", {"team": "red"})
    assert application.status == "pending"  # a rule that slipped in changes nothing
    assert TeamMembership.objects.get(user=world["alice"]).role == "member"


def test_checked_again_when_approved(world):
    filed = apply(world["alice"], {"team": "red"}).json()
    TeamMembership.objects.filter(user=world["alice"]).delete()  # left the team meanwhile
    done = client_for(world["root"]).post(f"/api/v1/applications/{filed['id']}/approve/")
    assert done.json()["status"] == "failed" and "not a member" in done.json()["error"]
    assert not admin_teams(world["alice"]).exists()
