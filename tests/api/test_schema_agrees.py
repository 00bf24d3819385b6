"""What the schema says about bodies is what the API does: unique clashes are 409, fields
fixed at creation are read-only on update, values of the wrong JSON type are 400, and
``weights`` / ``blacklist`` are never null."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from brokers.models import App, Broker, Team
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def root() -> APIClient:
    """A platform admin's client on a cluster ``c1`` (brokers 1, 2) and team ``red``."""
    red = Team.objects.create(name="red")
    cluster = factories.cluster_with_brokers()
    factories.topic("orders", cluster, red)
    factories.app("shop", red)
    client = APIClient()
    client.force_authenticate(factories.user("root", admin=True))
    return client


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def component(schema: dict, ref_holder: dict) -> dict:
    name = ref_holder["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    return schema["components"]["schemas"][name]


def test_unique_clashes_are_409_with_the_field(root):
    clashes = [
        ("/api/v1/clusters/", {"name": "c1"}, "name"),
        (
            "/api/v1/brokers/",
            {"id": 1, "cluster": "c1", "host": "10.0.0.9", "jmq4_port": 9001},
            "id",
        ),
        ("/api/v1/apps/", {"code": "shop", "team": "red"}, "code"),
    ]
    for url, body, field in clashes:
        response = root.post(url, body, format="json")
        assert response.status_code == 409, (url, response.content)
        assert response.json()["error"] == "conflict" and field in response.json()["fields"]
    root.post("/api/v1/clusters/", {"name": "c2"}, format="json")
    renamed = root.put(f"/api/v1/clusters/{Broker.objects.get(id=1).cluster_id}/", {"name": "c2"})
    assert renamed.status_code == 409
    # a clash together with an invalid value is invalid input first
    mixed = root.post("/api/v1/clusters/", {"name": "c1", "description": 5}, format="json")
    assert mixed.status_code == 400


def test_fields_fixed_at_creation_are_read_only_on_update(root, schema):
    broker = root.patch("/api/v1/brokers/1/", {"id": 77, "weight": 5}, format="json")
    assert broker.status_code == 200 and broker.json()["id"] == 1
    assert Broker.objects.filter(id=1, weight=5).exists() and not Broker.objects.filter(id=77)
    app = root.put("/api/v1/apps/shop/", {"code": "other", "team": "red"}, format="json")
    assert app.status_code == 200 and app.json()["code"] == "shop"
    assert App.objects.filter(code="shop").exists()
    paths = schema["paths"]
    for path, field in [
        ("/api/v1/brokers/{id}/", "id"),
        ("/api/v1/apps/{code}/", "code"),
        ("/api/v1/topics/{code}/", "code"),
        ("/api/v1/topics/{code}/", "partitions"),
        ("/api/v1/producer-policies/{id}/", "topic"),
        ("/api/v1/consumer-policies/{id}/", "app"),
    ]:
        for method in ("put", "patch"):
            body = component(schema, paths[path][method]["requestBody"])
            assert field not in body["properties"], (method, path, field)
    creating = component(schema, paths["/api/v1/brokers/"]["post"]["requestBody"])
    assert "id" in creating["properties"] and "id" in creating["required"]


@pytest.mark.parametrize(
    ("method", "url", "body", "field"),
    [
        ("patch", "/api/v1/approval-settings/", {"frozen": "true"}, "frozen"),
        ("patch", "/api/v1/approval-settings/", {"frozen": 1}, "frozen"),
        ("post", "/api/v1/clusters/", {"name": "c3", "description": 12}, "description"),
        ("patch", "/api/v1/brokers/1/", {"weight": "5"}, "weight"),
        ("patch", "/api/v1/brokers/1/", {"readable": "false"}, "readable"),
        ("post", "/api/v1/api-tokens/", {"name": 5}, "name"),
        ("patch", "/api/v1/brokers/1/", {"cluster": 0}, "cluster"),
        ("post", "/api/v1/apps/", {"code": "x", "team": ["red"]}, "team"),
    ],
)
def test_values_of_the_wrong_json_type_are_400(root, method, url, body, field):
    response = getattr(root, method)(url, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]


def test_weights_and_blacklist_are_never_null(root, schema):
    for kind in ("producer", "consumer"):
        response = root.post(
            f"/api/v1/{kind}-policies/",
            {"topic": "orders", "app": "shop", "blacklist": None},
            format="json",
        )
        assert response.status_code == 400 and "blacklist" in response.json()["fields"]
    response = root.post(
        "/api/v1/producer-policies/",
        {"topic": "orders", "app": "shop", "weights": None},
        format="json",
    )
    assert response.status_code == 400 and "weights" in response.json()["fields"]
    created = root.post(
        "/api/v1/producer-policies/",
        {"topic": "orders", "app": "shop", "weights": {"1": 3}, "blacklist": ["10.1.0.0/16"]},
        format="json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["weights"] == {"1": 3}
    components = schema["components"]["schemas"]
    for name, field, kind in [
        ("ProducerPolicyRequest", "weights", "object"),
        ("ProducerPolicyRequest", "blacklist", "array"),
        ("ConsumerPolicyRequest", "blacklist", "array"),
        ("ProducerPolicy", "weights", "object"),
    ]:
        prop = components[name]["properties"][field]
        assert prop["type"] == kind and not prop.get("nullable"), (name, field)


def test_the_schema_declares_409_where_unique_values_clash(schema):
    for path, methods in [
        ("/api/v1/clusters/", ["post"]),
        ("/api/v1/clusters/{id}/", ["put", "patch", "delete"]),
        ("/api/v1/brokers/", ["post"]),
        ("/api/v1/apps/{code}/", ["put", "patch"]),
        ("/api/v1/consumer-policies/", ["post"]),
    ]:
        for method in methods:
            assert "409" in schema["paths"][path][method]["responses"], (method, path)
    assert "409" not in schema["paths"]["/api/v1/api-tokens/"]["post"]["responses"]


def test_the_schema_declares_503_where_a_delete_erases_stored_data(schema):
    for path in ("/api/v1/topics/{code}/", "/api/v1/consumer-policies/{id}/"):
        assert "503" in schema["paths"][path]["delete"]["responses"], path
    assert "503" not in schema["paths"]["/api/v1/producer-policies/{id}/"]["delete"]["responses"]


def test_no_two_serializers_share_a_component_name():
    """drf-spectacular names a component after its serializer; two serializers of one name
    got one component, and the schema described one endpoint with the other's fields (a
    lag history answered against the lag list's schema)."""
    from drf_spectacular.drainage import GENERATOR_STATS

    GENERATOR_STATS.reset()
    SchemaGenerator().get_schema(request=None, public=True)
    clashes = [w for w in GENERATOR_STATS._warn_cache if "identical names" in w]
    assert clashes == []
