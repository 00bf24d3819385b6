"""Every list's documented filters filter: ``?topic=demo`` on the consumer policies lists
the consumers of demo only (it used to list every policy), and the schema names each."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def api() -> APIClient:
    """Team red: topics demo and other, apps shop and bank; team blue: topic blue-t, app
    blue-app; one paused consumer."""
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    cluster = factories.cluster_with_brokers()
    demo = factories.topic("demo", cluster, red, partitions=1, groups=1)
    other = factories.topic("other", cluster, red, partitions=1, groups=1)
    blue_t = factories.topic("blue-t", cluster, blue, partitions=1, groups=1)
    shop, bank = factories.app("shop", red)[0], factories.app("bank", red)[0]
    blue_app = factories.app("blue-app", blue)[0]
    for topic, app in [(demo, shop), (demo, bank), (other, shop), (blue_t, blue_app)]:
        ProducerPolicy.objects.create(topic=topic, app=app)
        ConsumerPolicy.objects.create(topic=topic, app=app, paused=app is bank)
    client = APIClient()
    client.force_authenticate(factories.user("root", admin=True))
    return client


def names(client: APIClient, url: str, key: str = "name") -> list[str]:
    response = client.get(url)
    assert response.status_code == 200, (url, response.content)
    return sorted(r[key] for r in response.json()["results"])


def test_policy_filters(api):
    for kind in ("consumer-policies", "producer-policies"):
        base = f"/api/v1/{kind}/"
        assert names(api, f"{base}?topic=demo") == ["bank.demo", "shop.demo"]
        assert names(api, f"{base}?app=shop") == ["shop.demo", "shop.other"]
        assert names(api, f"{base}?team=blue") == ["blue-app.blue-t"]
        assert names(api, f"{base}?topic=demo&app=bank") == ["bank.demo"]
        assert names(api, f"{base}?topic=nosuch") == []
        assert names(api, f"{base}?topic__code=demo") == ["bank.demo", "shop.demo"]
    base = "/api/v1/consumer-policies/"
    assert names(api, f"{base}?state=paused") == ["bank.demo"]
    assert len(names(api, f"{base}?state=running")) == 3
    assert api.get(f"{base}?state=sleeping").status_code == 400
    assert api.get(f"{base}?topic={'x' * 300}").status_code == 400


def test_topic_app_and_consumer_list_filters(api):
    assert names(api, "/api/v1/topics/?team=red", "code") == ["demo", "other"]
    assert names(api, "/api/v1/topics/?cluster=c1&team=blue", "code") == ["blue-t"]
    assert names(api, "/api/v1/topics/?cluster=nosuch", "code") == []
    assert names(api, "/api/v1/apps/?team=blue", "code") == ["blue-app"]
    assert names(api, "/api/v1/consumers/?app=shop") == ["shop.demo", "shop.other"]
    assert names(api, "/api/v1/consumers/?state=paused") == ["bank.demo"]
    assert names(api, "/api/v1/consumers/?team=red&topic=demo") == ["bank.demo", "shop.demo"]
    assert api.get("/api/v1/consumers/?state=maybe").status_code == 400
    # values of blanks are values (the schema allows them): they match what they say
    assert names(api, "/api/v1/consumers/?search=%0C") == []
    assert names(api, "/api/v1/consumers/?team=%20") == []
    assert names(api, "/api/v1/consumers/?search=%20&app=shop") == []


def test_the_schema_documents_the_filters():
    schema = SchemaGenerator().get_schema(request=None, public=True)

    def params(path: str) -> set[str]:
        return {p["name"] for p in schema["paths"][path]["get"].get("parameters", [])}

    assert {"topic", "app", "team", "state"} <= params("/api/v1/consumer-policies/")
    assert {"topic", "app", "team"} <= params("/api/v1/producer-policies/")
    assert {"team", "cluster", "type"} <= params("/api/v1/topics/")
    assert {"team"} <= params("/api/v1/apps/")
    assert {"team", "topic", "app", "state"} <= params("/api/v1/consumers/")
    assert {"team", "applicant"} <= params("/api/v1/applications/")
    assert {"team", "actor"} <= params("/api/v1/audit-events/")
