"""Teams in the console: members see their teams and who is in them; a team's admins
(and platform admins) add users, change roles and remove members, audited; a team keeps
one admin; other teams are not found; bad input is refused, never a 500."""

from __future__ import annotations

import pytest

from brokers.models import TeamMembership
from mqcloud.approvals.models import AuditEvent
from tests import factories

pytestmark = pytest.mark.django_db


def roles(team) -> dict[str, str]:
    return {m.user.username: m.role for m in team.memberships.select_related("user")}


def test_members_see_their_teams_and_no_forms(client, world):
    client.force_login(world.alice)
    listing = client.get("/teams/")
    assert [r["team"].name for r in listing.context["rows"]] == ["red"]
    assert listing.context["rows"][0]["role"] == "member"
    page = client.get("/teams/red/")
    assert page.status_code == 200 and not page.context["manages"]
    assert 'id="add-member"' not in page.content.decode()
    assert client.get("/teams/blue/").status_code == 404  # not hers: not disclosed
    refused = client.post("/teams/red/members/", {"username": "bob", "role": "member"})
    assert refused.status_code == 302 and roles(world.red) == {"alice": "member", "carol": "admin"}
    assert 'href="/teams/"' in client.get("/").content.decode()


def test_a_team_admin_adds_changes_and_removes_members(client, world):
    client.force_login(world.carol)
    assert client.get("/teams/red/").context["manages"]
    client.post("/teams/red/members/", {"username": "bob", "role": "member"})
    assert roles(world.red)["bob"] == "member"
    bob = TeamMembership.objects.get(team=world.red, user=world.bob)
    client.post(f"/teams/red/members/{bob.pk}/", {"role": "admin"})
    assert roles(world.red)["bob"] == "admin"
    client.post(f"/teams/red/members/{bob.pk}/", {"remove": "1"})
    assert "bob" not in roles(world.red)
    actions = list(
        AuditEvent.objects.filter(target="team:red").order_by("id").values_list("action", flat=True)
    )
    assert actions == ["team-member-added", "team-member-role", "team-member-removed"]
    assert AuditEvent.objects.filter(target="team:red", actor=world.carol).count() == 3


def test_a_team_keeps_its_last_admin(client, world):
    client.force_login(world.carol)
    carol = TeamMembership.objects.get(team=world.red, user=world.carol)
    client.post(f"/teams/red/members/{carol.pk}/", {"role": "member"})
    client.post(f"/teams/red/members/{carol.pk}/", {"remove": "1"})
    assert roles(world.red)["carol"] == "admin"
    alice = TeamMembership.objects.get(team=world.red, user=world.alice)
    client.post(f"/teams/red/members/{alice.pk}/", {"role": "admin"})
    left = client.post(f"/teams/red/members/{carol.pk}/", {"remove": "1"})  # one is left
    assert left["Location"] == "/teams/"  # she left: her team list, not a 404
    assert roles(world.red) == {"alice": "admin"}


def test_platform_admins_manage_every_team(client, world):
    client.force_login(world.root)
    assert {r["team"].name for r in client.get("/teams/").context["rows"]} == {"red", "blue"}
    client.post("/teams/blue/members/", {"username": "alice", "role": "admin"})
    assert roles(world.blue)["alice"] == "admin"


@pytest.mark.parametrize(
    "form",
    [
        {"username": "nobody", "role": "member"},
        {"username": "alice", "role": "member"},  # a member already
        {"username": "bob", "role": "owner"},
        {"username": "", "role": "member"},
        {"username": "b\x00b", "role": "member"},
        {"username": "x" * 151, "role": "member"},
    ],
)
def test_what_cannot_be_added_is_refused(client, world, form):
    inactive = factories.user("gone")
    inactive.is_active = False
    inactive.save()
    client.force_login(world.carol)
    answer = client.post("/teams/red/members/", form, follow=True)
    assert answer.status_code == 200
    assert roles(world.red) == {"alice": "member", "carol": "admin"}
    assert not AuditEvent.objects.filter(target="team:red").exists()


def test_bad_changes_are_refused(client, world):
    client.force_login(world.carol)
    alice = TeamMembership.objects.get(team=world.red, user=world.alice)
    assert client.post(f"/teams/red/members/{alice.pk}/", {"role": "owner"}).status_code == 400
    assert client.post("/teams/red/members/999999/", {"role": "admin"}).status_code == 404
    bob_blue = TeamMembership.objects.get(team=world.blue, user=world.bob)
    assert client.post(f"/teams/red/members/{bob_blue.pk}/", {"remove": "1"}).status_code == 404
    assert client.get(f"/teams/red/members/{alice.pk}/").status_code == 405
    assert roles(world.red) == {"alice": "member", "carol": "admin"}
    assert TeamMembership.objects.filter(pk=bob_blue.pk).exists()
