"""A policy's default name is ``<app>.<topic>`` while that fits and is free: a long app
and topic (100 + 200 characters) or two pairs that read alike (``a.b`` + ``c`` and ``a`` +
``b.c``) still get a policy, never a database error."""

from __future__ import annotations

import pytest

from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from tests import factories
from tests.api.test_api import client_for

pytestmark = pytest.mark.django_db


def test_long_and_alike_pairs_get_distinct_names():
    team = Team.objects.create(name="red")
    cluster = factories.cluster_with_brokers()
    root = client_for(factories.user("root", admin=True))
    long_topic = factories.topic("t" * 200, cluster, team)
    factories.topic("b.c", cluster, team)
    factories.topic("c", cluster, team)
    factories.app("a" * 100, team)
    factories.app("a.b", team)
    factories.app("a", team)
    names = set()
    for app, topic in (("a" * 100, long_topic.code), ("a.b", "c"), ("a", "b.c")):
        for kind in ("producer", "consumer"):
            response = root.post(f"/api/v1/{kind}-policies/", {"topic": topic, "app": app})
            assert response.status_code == 201, response.content
            name = response.json()["name"]
            assert len(name) <= 255 and name not in names
            if kind == "consumer":
                names.add(name)
    assert ConsumerPolicy.objects.get(app__code="a.b").name == "a.b.c"
    assert ConsumerPolicy.objects.get(app__code="a").name.startswith("a.b.c")
    assert ProducerPolicy.objects.count() == ConsumerPolicy.objects.count() == 3


@pytest.mark.parametrize("kind", ["producer", "consumer"])
def test_a_given_name_is_checked_like_the_default(kind):
    team = Team.objects.create(name="red")
    cluster = factories.cluster_with_brokers()
    root = client_for(factories.user("root", admin=True))
    factories.topic("t1", cluster, team)
    factories.topic("t2", cluster, team)
    factories.app("app", team)
    url = f"/api/v1/{kind}-policies/"
    first = root.post(url, {"topic": "t1", "app": "app", "name": "orders"})
    assert first.status_code == 201, first.content
    taken = root.post(url, {"topic": "t2", "app": "app", "name": "orders"})
    assert taken.status_code == 409 and "name" in taken.json()["fields"], taken.content
    for bad in ("bad name", "-x", "a/b"):
        response = root.post(url, {"topic": "t2", "app": "app", "name": bad})
        assert response.status_code == 400 and "name" in response.json()["fields"], bad


@pytest.mark.parametrize("kind", ["producer", "consumer"])
def test_clearing_a_policys_name_gives_the_default_which_its_own_name_may_be(kind):
    """PATCH ``{"name": ""}`` names the policy ``<app>.<topic>`` again; a policy that has
    that name keeps it (its own name counted as taken: renamed with a digest, which
    changed the name its HTTP-MQ clients send)."""
    team = Team.objects.create(name="red")
    factories.topic("t1", factories.cluster_with_brokers(), team)
    factories.app("app", team)
    root = client_for(factories.user("root", admin=True))
    url = f"/api/v1/{kind}-policies/"
    made = root.post(url, {"topic": "t1", "app": "app"}).json()
    assert made["name"] == "app.t1"
    again = root.patch(f"{url}{made['id']}/", {"name": ""}, format="json")
    assert again.status_code == 200 and again.json()["name"] == "app.t1", again.content
    root.patch(f"{url}{made['id']}/", {"name": "custom"}, format="json")
    back = root.patch(f"{url}{made['id']}/", {"name": ""}, format="json")
    assert back.json()["name"] == "app.t1"


def test_fit_policy_name_marks_what_it_cuts_and_counts_attempts():
    from brokers.models import POLICY_NAME_MAX, fit_policy_name

    assert fit_policy_name("a.b", "k") == "a.b"
    first, second = fit_policy_name("a.b", "k", 1), fit_policy_name("a.b", "k", 2)
    assert first.startswith("a.b-") and second == first + "-2"
    long = fit_policy_name("x" * 300, "k")
    assert len(long) == POLICY_NAME_MAX and long == fit_policy_name("x" * 300, "k", 1)
