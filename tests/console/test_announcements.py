"""Announcements (console-features "notices"): a platform admin posts a notice that every
user sees as a banner on every page while it runs — scheduled ones not yet, ended or
withdrawn ones no more — a user hides one for its session, only platform admins post and
withdraw (audited), bad input gets the form's message, and the REST API offers the same."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from mqcloud.approvals.models import AuditEvent
from mqcloud.console import announcements
from mqcloud.console.models import Announcement

pytestmark = pytest.mark.django_db


def banner_ids(client, path: str = "/topics/") -> list[int]:
    page = client.get(path)
    return [a.pk for a in page.context["announcements"]]


def test_an_admin_posts_and_every_user_sees_the_banner(client, world):
    client.force_login(world.root)
    posted = client.post(
        "/announcements/",
        {"text": "Maintenance Saturday 02:00–04:00 UTC.", "level": "warning"},
    )
    assert posted.status_code == 302 and posted["Location"] == "/announcements/"
    item = Announcement.objects.get()
    assert (item.level, item.created_by, item.ends_at) == ("warning", world.root, None)
    client.force_login(world.alice)
    page = client.get("/consumers/").content.decode()
    assert "Maintenance Saturday" in page and 'class="flash-warning"' in page
    assert banner_ids(client) == [item.pk]
    assert client.post("/announcements/", {"text": "mine", "level": "info"}).status_code == 403
    hidden = client.post(f"/announcements/{item.pk}/hide/", {"next": "/consumers/"})
    assert hidden["Location"] == "/consumers/" and banner_ids(client) == []
    client.force_login(world.bob)  # another session still sees it
    assert banner_ids(client) == [item.pk]
    assert client.post(f"/announcements/{item.pk}/withdraw/").status_code == 403

    client.force_login(world.root)
    assert client.post(f"/announcements/{item.pk}/withdraw/").status_code == 302
    client.force_login(world.bob)
    assert banner_ids(client) == []
    listed = client.get("/announcements/").content.decode()
    assert 'data-state="withdrawn"' in listed
    trail = AuditEvent.objects.filter(target=f"announcement:{item.pk}").order_by("id")
    assert [e.action for e in trail] == ["announcement-posted", "announcement-withdrawn"]


def test_only_running_announcements_show(client, world):
    now = timezone.now()
    later = announcements.post(world.root, "later", starts_at=now + timedelta(hours=1))
    soon_over = announcements.post(world.root, "soon over", ends_at=now + timedelta(hours=1))
    Announcement.objects.filter(pk=soon_over.pk).update(ends_at=now - timedelta(minutes=1))
    live = announcements.post(world.root, "live", ends_at=now + timedelta(days=1))
    client.force_login(world.alice)
    assert banner_ids(client) == [live.pk]
    states = {a.pk: s for a, s in client.get("/announcements/").context["rows"]}
    assert states == {later.pk: "scheduled", soon_over.pk: "ended", live.pk: "running"}
    running = client.get("/announcements/?state=running").context["rows"]
    assert [a.pk for a, _ in running] == [live.pk]


def test_bad_announcements_are_refused(client, world):
    client.force_login(world.root)
    empty = client.post("/announcements/", {"text": "  ", "level": "info"})
    assert empty.status_code == 400 and empty.context["form"].errors
    level = client.post("/announcements/", {"text": "x", "level": "shout"})
    assert level.status_code == 400 and "level" in level.context["form"].errors
    past = client.post(
        "/announcements/", {"text": "x", "level": "info", "ends_at": "2001-01-01T00:00"}
    )
    assert past.status_code == 400 and "not be past" in past.content.decode()
    assert not Announcement.objects.exists()


def test_the_api_posts_lists_and_withdraws(client, world):
    api = "/api/v1/announcements/"
    client.force_login(world.alice)
    refused = client.post(api, {"text": "x"}, content_type="application/json")
    assert refused.status_code == 403
    client.force_login(world.root)
    made = client.post(api, {"text": "Upgrade tonight."}, content_type="application/json")
    assert made.status_code == 201
    body = made.json()
    assert (body["level"], body["state"], body["created_by"]) == ("info", "running", "root")
    bad = client.post(
        api, {"text": "x", "ends_at": "2001-01-01T00:00:00Z"}, content_type="application/json"
    )
    assert bad.status_code == 400 and "ends_at" in bad.json()["fields"]
    assert client.post(api, {"text": 3}, content_type="application/json").status_code == 400
    client.force_login(world.alice)
    running = client.get(f"{api}?state=running").json()["results"]
    assert [a["id"] for a in running] == [body["id"]]
    assert client.get(f"{api}?state=sometime").status_code == 400
    assert client.post(f"{api}{body['id']}/withdraw/").status_code == 403
    client.force_login(world.root)
    gone = client.post(f"{api}{body['id']}/withdraw/")
    assert gone.status_code == 200 and gone.json()["state"] == "withdrawn"
    assert client.get(f"{api}?state=running").json()["results"] == []
