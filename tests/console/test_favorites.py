"""Favorite topics (console-features "Favorites"): a user stars topics it may see from the
topic list or a topic's page (a form or htmx), they head its dashboard and filter the
list; others' topics cannot be starred, a topic no longer visible is hidden, stars are
per user, bounded, and the REST API offers the same."""

from __future__ import annotations

import pytest

from brokers.models import Topic
from mqcloud.console import favorites
from mqcloud.console.models import FavoriteTopic
from tests import factories

pytestmark = pytest.mark.django_db


def starred_on_list(client) -> list[str]:
    rows = client.get("/topics/?starred=starred").context["rows"]
    return [row.topic.code for row in rows]


def test_a_user_stars_a_topic_and_sees_it_first(client, world):
    client.force_login(world.alice)
    assert "No favorites yet" in client.get("/").content.decode()
    page = client.get("/topics/").content.decode()
    assert 'action="/topics/orders/star/"' in page and 'aria-pressed="false"' in page
    done = client.post("/topics/orders/star/", {"starred": "1", "next": "/topics/?sort=code"})
    assert done.status_code == 302 and done["Location"] == "/topics/?sort=code"
    assert starred_on_list(client) == ["orders"]
    board = client.get("/")
    assert [row.topic.code for row in board.context["favorites"]] == ["orders"]
    assert 'aria-pressed="true"' in client.get("/topics/orders/").content.decode()
    again = client.post("/topics/orders/star/", {"starred": "1"})  # twice: still one
    assert again["Location"] == "/topics/orders/" and FavoriteTopic.objects.count() == 1

    swapped = client.post("/topics/orders/star/", {"starred": "0"}, HTTP_HX_REQUEST="true")
    assert swapped.status_code == 200 and 'aria-pressed="false"' in swapped.content.decode()
    assert starred_on_list(client) == [] and FavoriteTopic.objects.count() == 0


def test_stars_are_per_user_and_only_on_visible_topics(client, world):
    favorites.star(world.root, world.blue_topic)
    client.force_login(world.alice)
    assert client.post("/topics/blue-secret/star/", {"starred": "1"}).status_code == 404
    assert client.get("/topics/blue-secret/star/").status_code == 405
    evil = client.post("/topics/orders/star/", {"starred": "1", "next": "//evil.example/x"})
    assert evil["Location"] == "/topics/orders/"  # never off the console
    assert starred_on_list(client) == ["orders"]
    client.force_login(world.root)
    assert starred_on_list(client) == ["blue-secret"]

    world.red.memberships.filter(user=world.alice).delete()  # alice left the team
    client.force_login(world.alice)
    assert starred_on_list(client) == [] and client.get("/").context["favorites"] == []
    Topic.objects.filter(pk=world.blue_topic.pk).delete()  # a deleted topic's stars go
    assert not FavoriteTopic.objects.filter(user=world.root).exists()


def test_a_user_stars_at_most_the_limit(client, world, monkeypatch):
    monkeypatch.setattr(favorites, "FAVORITES_MAX", 1)
    client.force_login(world.root)
    assert favorites.star(world.root, world.topic)
    refused = client.post("/topics/blue-secret/star/", {"starred": "1"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 200 and "at most 1 topics" in refused.content.decode()
    assert starred_on_list(client) == ["orders"]


def test_the_dashboard_shows_a_bounded_number_by_code(client, world, monkeypatch):
    from mqcloud.console import dashboard

    monkeypatch.setattr(dashboard, "FAVORITES_SHOWN", 2)
    for code in ("t-c", "t-a", "t-b"):
        topic = factories.topic(code, world.topic.cluster, world.red, partitions=1, groups=1)
        favorites.star(world.alice, topic)
    client.force_login(world.alice)
    board = client.get("/")
    assert [row.topic.code for row in board.context["favorites"]] == ["t-a", "t-b"]
    assert board.context["favorites_more"] and "see them all" in board.content.decode()


def test_the_api_lists_stars_and_unstars(client, world):
    client.force_login(world.alice)
    api = "/api/v1/favorites/"
    made = client.post(api, {"topic": "orders"}, content_type="application/json")
    assert made.status_code == 201 and made.json()["topic"] == "orders"
    assert made.json()["team"] == "red"
    same = client.post(api, {"topic": "orders"}, content_type="application/json")
    assert same.status_code == 200
    hidden = client.post(api, {"topic": "blue-secret"}, content_type="application/json")
    assert hidden.status_code == 404
    wrong = client.post(api, {"topic": 12}, content_type="application/json")
    assert wrong.status_code == 400
    listed = client.get(api).json()
    assert [row["topic"] for row in listed["results"]] == ["orders"]
    assert client.delete(f"{api}orders/").status_code == 204
    assert client.delete(f"{api}orders/").status_code == 404
    assert client.get(api).json()["results"] == []
