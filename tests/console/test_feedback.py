"""Feedback (console-features "feedback"): a user writes to the platform admins from any
page, every admin is notified, one answers and the author is notified; users read only
their own, the text is validated, sending is limited per hour, everything is audited, and
the REST API offers the same."""

from __future__ import annotations

import pytest

from mqcloud.approvals.models import AuditEvent, Notification
from mqcloud.console import feedback
from mqcloud.console.models import Feedback
from tests import factories

pytestmark = pytest.mark.django_db


def test_a_user_sends_feedback_and_an_admin_answers(client, world):
    other_admin = factories.user("root2", admin=True)
    client.force_login(world.alice)
    assert 'href="/feedback/?from=/topics/"' in client.get("/topics/").content.decode()
    form = client.get("/feedback/?from=/topics/orders/")
    assert form.context["form"].initial["page"] == "/topics/orders/"
    sent = client.post("/feedback/", {"text": "  Topic pages load slowly.  ", "page": "/topics/"})
    assert sent.status_code == 302 and sent["Location"] == "/feedback/"
    item = Feedback.objects.get()
    assert (item.author, item.text, item.page, item.state) == (
        world.alice,
        "Topic pages load slowly.",
        "/topics/",
        "open",
    )
    admins = Notification.objects.filter(message__startswith=f"Feedback #{item.pk} from alice")
    assert {n.user for n in admins} == {world.root, other_admin}
    assert [f.pk for f in client.get("/feedback/").context["listing"].rows] == [item.pk]

    assert client.post(f"/feedback/{item.pk}/answer/", {"answer": "no"}).status_code == 403
    client.force_login(world.root)
    page = client.get("/feedback/").content.decode()
    assert "Topic pages load slowly." in page and f'action="/feedback/{item.pk}/answer/"' in page
    empty = client.post(f"/feedback/{item.pk}/answer/", {"answer": "   "})
    assert empty.status_code == 302 and Feedback.objects.get().state == "open"
    done = client.post(f"/feedback/{item.pk}/answer/", {"answer": "Fixed in 2.4, thanks."})
    assert done.status_code == 302 and done["Location"] == f"/feedback/#feedback-{item.pk}"
    item.refresh_from_db()
    assert (item.state, item.answer, item.answered_by) == (
        "answered",
        "Fixed in 2.4, thanks.",
        world.root,
    )
    told = Notification.objects.get(user=world.alice)
    assert told.message == f"Your feedback #{item.pk} was answered: Fixed in 2.4, thanks."
    trail = AuditEvent.objects.filter(target=f"feedback:{item.pk}").order_by("id")
    assert [(e.actor, e.action) for e in trail] == [
        (world.alice, "feedback-sent"),
        (world.root, "feedback-answered"),
    ]


def test_users_read_only_their_own_feedback(client, world):
    mine = feedback.send(world.alice, "mine")
    feedback.send(world.bob, "bob's")
    client.force_login(world.alice)
    assert [f.pk for f in client.get("/feedback/").context["listing"].rows] == [mine.pk]
    client.force_login(world.root)
    assert len(client.get("/feedback/").context["listing"].rows) == 2
    assert len(client.get("/feedback/?state=answered").context["listing"].rows) == 0


def test_bad_feedback_is_refused_with_the_forms_message(client, world, monkeypatch):
    client.force_login(world.alice)
    empty = client.post("/feedback/", {"text": "   "})
    assert empty.status_code == 200 and empty.context["form"].errors["text"]
    long = client.post("/feedback/", {"text": "x" * 4001})
    assert long.status_code == 200 and "4000" in str(long.context["form"].errors["text"])
    nul = client.post("/feedback/", {"text": "a\x00b"})
    assert nul.status_code == 200 and nul.context["form"].errors
    offsite = client.post("/feedback/", {"text": "hi", "page": "//evil.example/"})
    assert offsite.status_code == 302 and Feedback.objects.get().page == ""
    monkeypatch.setattr(feedback, "FEEDBACK_PER_HOUR", 2)
    assert client.post("/feedback/", {"text": "two"}).status_code == 302
    flood = client.post("/feedback/", {"text": "three"})
    assert flood.status_code == 429 and "in the last hour" in flood.content.decode()
    assert Feedback.objects.count() == 2


def test_the_api_sends_lists_and_answers(client, world, monkeypatch):
    api = "/api/v1/feedback/"
    client.force_login(world.alice)
    sent = client.post(api, {"text": "More charts, please."}, content_type="application/json")
    assert sent.status_code == 201
    body = sent.json()
    assert (body["author"], body["state"], body["page"], body["answer"]) == (
        "alice",
        "open",
        "",
        "",
    )
    bad = client.post(api, {"text": 5}, content_type="application/json")
    assert bad.status_code == 400 and "text" in bad.json()["fields"]
    assert client.post(api, {"text": ""}, content_type="application/json").status_code == 400
    answer = f"{api}{body['id']}/answer/"
    refused = client.post(answer, {"answer": "no"}, content_type="application/json")
    assert refused.status_code == 403
    monkeypatch.setattr(feedback, "FEEDBACK_PER_HOUR", 1)
    flood = client.post(api, {"text": "again"}, content_type="application/json")
    assert flood.status_code == 429 and flood.json()["error"] == "throttled"

    client.force_login(world.bob)
    assert client.get(f"{api}{body['id']}/").status_code == 404
    assert client.get(api).json()["results"] == []
    client.force_login(world.root)
    done = client.post(answer, {"answer": "Coming."}, content_type="application/json")
    assert done.status_code == 200 and done.json()["state"] == "answered"
    assert done.json()["answered_by"] == "root"
    assert client.post(answer, {"answer": 1}, content_type="application/json").status_code == 400
    assert [f["id"] for f in client.get(f"{api}?state=answered").json()["results"]] == [body["id"]]
