"""Topic codes: the characters VibeMQ allows for queue names (§13), 1-256 of them, a
leading '.', '_' or '-' included; '.' and '..' are refused everywhere (they are path
segments with a meaning of their own in the console's and the API's URLs)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from brokers.anonymous import open_topic, policy_name
from brokers.models import ConsumerPolicy, Team, Topic
from brokers.topic_codes import is_topic_code
from tests import factories
from tests.api.test_api import client_for

GOOD = ["_jobs", "-jobs", ".hidden", "a", "q" * 256, "a.b-c_d"]
BAD = [".", "..", "", "q" * 257, "a b", "é", "a:b", "a/b", "a\n"]


@pytest.mark.parametrize("code", GOOD)
def test_good_codes(code):
    assert is_topic_code(code)


@pytest.mark.parametrize("code", BAD)
def test_bad_codes(code):
    assert not is_topic_code(code)


@pytest.mark.django_db
@pytest.mark.parametrize("code", BAD)
def test_the_model_refuses_what_the_rule_refuses(code):
    team = Team.objects.create(name="red")
    cluster = factories.cluster_with_brokers()
    with pytest.raises(ValidationError) as info:
        Topic(code=code, cluster=cluster, team=team).full_clean()
    assert "code" in info.value.error_dict


@pytest.mark.django_db
def test_api_and_console_serve_every_good_code(client):
    Team.objects.create(name="red")
    factories.cluster_with_brokers()
    root = factories.user("root", admin=True)
    api = client_for(root)
    client.force_login(root)
    for code in GOOD:
        created = api.post(
            "/api/v1/topics/", {"code": code, "cluster": "c1", "team": "red"}, format="json"
        )
        assert created.status_code == 201, (code, created.content)
        got = api.get(f"/api/v1/topics/{code}/")
        assert (got.status_code, got.json()["code"]) == (200, code)
        page = client.get(f"/topics/{code}/")
        assert page.status_code == 200, code
    for code in ("..", "q" * 257):
        refused = api.post(
            "/api/v1/topics/", {"code": code, "cluster": "c1", "team": "red"}, format="json"
        )
        assert refused.status_code == 400 and "code" in refused.json()["fields"], code


@pytest.mark.django_db
def test_a_256_character_topic_opens_to_token_less_clients():
    team = Team.objects.create(name="red")
    topic = factories.topic("q" * 256, factories.cluster_with_brokers(), team)
    open_topic(topic)
    policy = ConsumerPolicy.objects.get(topic=topic)
    assert policy.name == policy_name(topic) and len(policy.name) <= 255
    assert policy.name.startswith("anonymous.qqq")
