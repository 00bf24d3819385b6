"""A broadcast consumer's clients and a fan-out queue's members each consume from their
own progress: the console's consumer page, the API's ``clients`` endpoint and every list
show their lags, the consumer's being its slowest client's — never the group's own
progress, which none of them moves."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings
from rest_framework.test import APIClient

from brokers.catalog_loader import publish
from brokers.engine import Engine, Message
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


def setup_consumer(code: str, *, broadcast: bool = False, fan_out: bool = False) -> Team:
    redis.Redis.from_url(settings.REDIS_URL).flushall()  # earlier tests' messages
    team = Team.objects.create(name=f"{code}-team")
    topic = factories.topic(code, factories.cluster_with_brokers(code[:2]), team, 2, 1)
    if fan_out:
        topic.delivery_mode = "FanOutWithAck"
        topic.save()
    app, _ = factories.app(f"{code}-app", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    mode = ConsumerPolicy.Mode.BROADCAST if broadcast else ConsumerPolicy.Mode.CLUSTERING
    ConsumerPolicy.objects.create(topic=topic, app=app, start_position="earliest", mode=mode)
    publish()
    return team


def produce(topic: str, app: str, n: int) -> None:
    async def run(engine: Engine) -> None:
        for i in range(n):
            await engine.append(topic, app, [Message(b"m")], partition=i % 2)

    engine_call(run)


def broadcast_consume(topic: str, app: str, client_id: str, acked: int) -> None:
    async def run(engine: Engine) -> None:
        done = 0
        for _ in (0, 1):  # a fetch takes from one partition
            got = await engine.fetch(
                topic, app, count=10, owner=client_id, address="10.0.0.9:1", client_id=client_id
            )
            indexes = [d.index for d in got.messages][: max(0, acked - done)]
            done += len(indexes)
            if indexes:
                await engine.ack(topic, app, got.partition, indexes, client_id=client_id)

    engine_call(run)


def member_consume(topic: str, app: str, member: str, acked: int) -> None:
    async def run(engine: Engine) -> None:
        done = 0
        for _ in (0, 1):  # a lease takes from one partition
            got = await engine.lease(topic, app, count=10, owner="o", client_id=member)
            for d in got.deliveries:
                if done < acked:
                    await engine.settle(topic, app, d.partition, [d.index], client_id=member)
                    done += 1

    engine_call(run)


def api_client(team: Team) -> APIClient:
    client = APIClient()
    user = factories.user(f"{team.name}-m", team=team)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {factories.token_for(user)}")
    return client


def test_a_broadcast_consumers_page_api_and_list_show_each_clients_lag(client):
    team = setup_consumer("bcast", broadcast=True)
    produce("bcast", "bcast-app", 6)
    broadcast_consume("bcast", "bcast-app", "fast", 6)
    broadcast_consume("bcast", "bcast-app", "slow", 2)
    client.force_login(factories.user("bcast-viewer", team=team))

    page = client.get("/consumers/bcast-app.bcast/")
    assert page.context["total_lag"] == 4
    assert [(c["client_id"], c["lag"]) for c in page.context["client_lags"]] == [
        ("slow", 4),
        ("fast", 0),
    ]
    html = page.content.decode()
    assert 'id="client-lags"' in html and 'href="/consumers/bcast-app.bcast/?client=slow"' in html
    polled = client.get("/consumers/bcast-app.bcast/progress/").context
    assert polled["total_lag"] == 4 and len(polled["client_lags"]) == 2
    one = client.get("/consumers/bcast-app.bcast/", {"client": "slow"}).context
    assert one["client_lags"] == [] and one["total_lag"] == 4
    assert sum(r["p"].lag for r in one["partitions"]) == 4

    api = api_client(team)
    rows = api.get("/api/v1/consumers/bcast-app.bcast/clients/").json()
    assert [(r["client_id"], r["lag"], r["lagging_partitions"]) for r in rows] == [
        ("slow", 4, 2),
        ("fast", 0, 0),
    ]
    assert rows[0]["oldest_unacked_age_ms"] >= 0 and rows[1]["oldest_unacked_age_ms"] is None
    assert api.get("/api/v1/consumers/bcast-app.bcast/").json()["lag"] == 4
    listed = api.get("/api/v1/consumers/").json()["results"]
    assert [(r["name"], r["lag"]) for r in listed] == [("bcast-app.bcast", 4)]
    assert [r.lag for r in client.get("/consumers/").context["rows"]] == [4]


def test_a_fan_out_queues_page_and_api_show_each_members_lag(client):
    team = setup_consumer("fanq", fan_out=True)

    async def join(engine: Engine) -> None:
        for member in ("x", "y"):
            await engine.join("fanq", "fanq-app", member)

    engine_call(join)
    produce("fanq", "fanq-app", 4)
    member_consume("fanq", "fanq-app", "x", 4)
    member_consume("fanq", "fanq-app", "y", 1)
    client.force_login(factories.user("fanq-viewer", team=team))
    page = client.get("/consumers/fanq-app.fanq/")
    assert page.context["total_lag"] == 3
    assert [(c["client_id"], c["lag"]) for c in page.context["client_lags"]] == [
        ("y", 3),
        ("x", 0),
    ]
    assert "Member</th>" in page.content.decode()
    rows = api_client(team).get("/api/v1/consumers/fanq-app.fanq/clients/").json()
    assert [(r["client_id"], r["lag"]) for r in rows] == [("y", 3), ("x", 0)]


def test_a_consumer_without_clients_shows_its_partitions(client):
    """A broadcast consumer no client consumed yet: its group's progress (all is behind)."""
    team = setup_consumer("nocl", broadcast=True)
    produce("nocl", "nocl-app", 3)
    client.force_login(factories.user("nocl-viewer", team=team))
    context = client.get("/consumers/nocl-app.nocl/").context
    assert context["client_lags"] == [] and context["total_lag"] == 3
    assert len(context["partitions"]) == 2
    api = api_client(team)
    assert api.get("/api/v1/consumers/nocl-app.nocl/clients/").json() == []


def test_a_clustering_consumer_has_no_clients():
    team = setup_consumer("clus")
    response = api_client(team).get("/api/v1/consumers/clus-app.clus/clients/")
    assert response.status_code == 404
