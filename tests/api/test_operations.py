"""Offset resets and skip backlog: applied for, approved, run by a real Celery worker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from brokers.catalog_loader import publish
from brokers.engine import Engine, Message
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from tests import factories
from tests.engine_calls import engine_call
from tests.httpmq.conftest import session_database_url

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker(tmp_path):
    """A real Celery worker on the session's Redis and test database."""
    env = {**os.environ, "DATABASE_URL": session_database_url()}
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "mqcloud",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield proc
    proc.terminate()
    proc.wait(timeout=20)
    log.close()


def member_and_admin(team: Team) -> tuple[APIClient, APIClient]:
    """API clients of a member of ``team`` and of a platform admin."""
    clients = []
    for user in (
        factories.user(f"{team.name}-m", team=team),
        factories.user(f"{team.name}-a", admin=True),
    ):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {factories.token_for(user)}")
        clients.append(client)
    return clients[0], clients[1]


def test_offset_reset_runs_on_a_worker_with_progress(worker):
    team = Team.objects.create(name="ops")
    topic = factories.topic("ops-topic", factories.cluster_with_brokers("oc"), team, 2, 1)
    app, _ = factories.app("ops-app", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    ConsumerPolicy.objects.create(topic=topic, app=app, start_position="earliest")
    publish()

    async def produce_and_consume(engine: Engine) -> None:
        for p in (0, 1):
            await engine.append("ops-topic", "ops-app", [Message(b"a"), Message(b"b")], partition=p)
        await engine.reset_offsets("ops-topic", "ops-app", position="latest")

    engine_call(produce_and_consume)
    alice, root = member_and_admin(team)

    bad = alice.post(
        "/api/v1/applications/",
        {
            "kind": "offset_reset",
            "payload": {"consumer": "ops-app.ops-topic", "position": "timestamp"},
        },
        format="json",
    )
    assert bad.status_code == 400 and "timestamp_ms" in bad.json()["fields"]
    created = alice.post(
        "/api/v1/applications/",
        {
            "kind": "offset_reset",
            "payload": {"consumer": "ops-app.ops-topic", "position": "earliest"},
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    app_id = created.json()["id"]
    approved = root.post(f"/api/v1/applications/{app_id}/approve/").json()
    assert approved["status"] == "approved" and approved["result"]["task_id"]

    deadline = time.monotonic() + 60
    while (state := alice.get(f"/api/v1/applications/{app_id}/progress/").json())[
        "state"
    ] != "SUCCESS":
        assert state["state"] in ("PENDING", "PROGRESS", "STARTED"), state
        assert time.monotonic() < deadline, "the worker never finished the reset"
        time.sleep(0.2)
    assert state["done"] == state["total"] == 2
    assert state["positions"] == {"0": 0, "1": 0}

    progress = engine_call(lambda e: e.progress("ops-topic", "ops-app"))
    assert [(r.ack_index, r.lag) for r in progress] == [(0, 2), (0, 2)]

    skip = alice.post(
        "/api/v1/applications/",
        {"kind": "skip_backlog", "payload": {"consumer": "ops-app.ops-topic"}},
        format="json",
    ).json()
    result = root.post(f"/api/v1/applications/{skip['id']}/approve/").json()
    assert result["result"]["spec"]["position"] == "timestamp"
    deadline = time.monotonic() + 60
    while alice.get(f"/api/v1/applications/{skip['id']}/progress/").json()["state"] != "SUCCESS":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    progress = engine_call(lambda e: e.progress("ops-topic", "ops-app"))
    # Skip backlog resets to now − 60 s: these messages are seconds old, so they stay.
    assert [r.lag for r in progress] == [2, 2]


def test_dead_letter_resend_application():
    from brokers.engine import RETRY_PARTITION, RetryType

    team = Team.objects.create(name="dlq")
    topic = factories.topic("dlq-topic", factories.cluster_with_brokers("dq"), team, 1, 1)
    app, _ = factories.app("dlq-app", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    ConsumerPolicy.objects.create(topic=topic, app=app, start_position="earliest", err_times=1)
    publish()

    async def make_dead_letter(engine: Engine) -> tuple[int, int]:
        await engine.append("dlq-topic", "dlq-app", [Message(b"poison")], partition=0)
        fetched = await engine.fetch("dlq-topic", "dlq-app", owner="c")
        acked = await engine.ack(
            "dlq-topic",
            "dlq-app",
            0,
            [fetched.messages[0].index],
            retry_type=RetryType.EXCEPTION,
            owner="c",
            token=fetched.lock_token,
        )
        await engine.ack(
            "dlq-topic",
            "dlq-app",
            RETRY_PARTITION,
            list(acked.retry_ids),
            retry_type=RetryType.EXCEPTION,
        )
        return await engine.retry_counts("dlq-topic", "dlq-app")

    assert engine_call(make_dead_letter) == (0, 1)
    member = APIClient()
    member.credentials(
        HTTP_AUTHORIZATION=f"Bearer {factories.token_for(factories.user('dm', team=team))}"
    )
    admin = APIClient()
    admin.credentials(
        HTTP_AUTHORIZATION=f"Bearer {factories.token_for(factories.user('da', admin=True))}"
    )
    bad = member.post(
        "/api/v1/applications/",
        {"kind": "dlq_resend", "payload": {"consumer": "dlq-app.dlq-topic", "ids": [-1]}},
        format="json",
    )
    assert bad.status_code == 400 and "ids" in bad.json()["fields"]
    created = member.post(
        "/api/v1/applications/",
        {"kind": "dlq_resend", "payload": {"consumer": "dlq-app.dlq-topic"}},
        format="json",
    ).json()
    result = admin.post(f"/api/v1/applications/{created['id']}/approve/").json()
    assert result["status"] == "approved" and result["result"] == {"resent": 1}
    assert engine_call(lambda e: e.retry_counts("dlq-topic", "dlq-app")) == (1, 0)


def test_retry_skip_application_skips_retries_older_than_a_time_by_key():
    team = Team.objects.create(name="skips")
    topic = factories.topic("skip-topic", factories.cluster_with_brokers("sk"), team, 1, 1)
    app, _ = factories.app("skip-app", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    ConsumerPolicy.objects.create(topic=topic, app=app, start_position="earliest")
    publish()

    async def retries(engine: Engine) -> int:
        for key in ("order-1", "order-2", "order-1"):
            msg = Message(b"x", business_id=key)
            await engine.append("skip-topic", "skip-app", [msg], partition=0)
        await engine.retry("skip-topic", "skip-app", 0, [0, 1, 2])
        return engine.now_ms() + 1

    before = engine_call(retries)
    member = APIClient()
    member.credentials(
        HTTP_AUTHORIZATION=f"Bearer {factories.token_for(factories.user('sm', team=team))}"
    )
    admin = APIClient()
    admin.credentials(
        HTTP_AUTHORIZATION=f"Bearer {factories.token_for(factories.user('sa', admin=True))}"
    )
    consumer = "skip-app.skip-topic"
    for payload, field in (
        ({"consumer": consumer, "before_ms": -1}, "before_ms"),
        ({"consumer": consumer, "before_ms": "soon"}, "before_ms"),
        ({"consumer": consumer}, "before_ms"),
        ({"consumer": consumer, "before_ms": 1, "business_id": "k" * 101}, "business_id"),
        ({"consumer": consumer, "before_ms": 1, "client_id": "c1"}, "client_id"),
    ):
        bad = member.post(
            "/api/v1/applications/", {"kind": "retry_skip", "payload": payload}, format="json"
        )
        assert bad.status_code == 400 and field in bad.json()["fields"], bad.json()
    created = member.post(
        "/api/v1/applications/",
        {
            "kind": "retry_skip",
            "payload": {"consumer": consumer, "before_ms": before, "business_id": "order-1"},
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    result = admin.post(f"/api/v1/applications/{created.json()['id']}/approve/").json()
    assert result["status"] == "approved" and result["result"] == {"skipped": 2}
    left = engine_call(lambda e: e.retries("skip-topic", "skip-app"))
    assert [r.message.business_id for r in left] == ["order-2"]


def _reconsumed(member: APIClient, admin: APIClient, payload: dict) -> tuple[dict, dict]:
    """File a reconsume application, approve it and wait for its worker: (the approved
    application's result, the operation's final progress)."""
    created = member.post(
        "/api/v1/applications/", {"kind": "reconsume", "payload": payload}, format="json"
    )
    assert created.status_code == 201, created.json()
    approved = admin.post(f"/api/v1/applications/{created.json()['id']}/approve/").json()
    assert approved["status"] == "approved", approved
    return approved["result"], _finished(member, created.json()["id"])


def _finished(client: APIClient, app_id: int) -> dict:
    """The progress of an application's operation, once its worker has finished it."""
    deadline = time.monotonic() + 60
    while (state := client.get(f"/api/v1/applications/{app_id}/progress/").json())[
        "state"
    ] != "SUCCESS":
        assert state["state"] in ("PENDING", "PROGRESS", "STARTED"), state
        assert time.monotonic() < deadline, "the worker never finished the operation"
        time.sleep(0.2)
    return state


def test_reconsume_application_copies_the_span_on_a_worker(worker):
    """A consumer gets a time span again: the application takes the spans when approved
    (too large: failed, nothing copied), a worker copies them into the consumer's retry
    store, and a consumer of the group leases them; its offsets stay where they were."""
    from brokers.engine import RETRY_PARTITION

    team = Team.objects.create(name="again")
    topic = factories.topic("again-topic", factories.cluster_with_brokers("ag"), team, 1, 1)
    app, _ = factories.app("again-app", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    ConsumerPolicy.objects.create(topic=topic, app=app, start_position="earliest")
    publish()
    from_ms = int(time.time() * 1000) - 1

    async def produce_and_consume(engine: Engine) -> None:
        await engine.append("again-topic", "again-app", [Message(b"x"), Message(b"y")], partition=0)
        await engine.reset_offsets("again-topic", "again-app", position="latest")

    engine_call(produce_and_consume)
    to_ms = int(time.time() * 1000) + 1
    alice, root = member_and_admin(team)
    payload = {"consumer": "again-app.again-topic", "from_ms": to_ms, "to_ms": from_ms}
    bad = alice.post(
        "/api/v1/applications/", {"kind": "reconsume", "payload": payload}, format="json"
    )
    assert bad.status_code == 400 and "to_ms" in bad.json()["fields"]
    payload = {"consumer": "again-app.again-topic", "from_ms": from_ms, "to_ms": to_ms}
    result, state = _reconsumed(alice, root, payload)
    assert result["messages"] == 2 and result["spans"] == {"0": [0, 2]}
    assert state["copied"] == {"0": 2}

    async def consume(engine: Engine):
        lease = await engine.lease("again-topic", "again-app", count=10, owner="t")
        progress = await engine.progress("again-topic", "again-app")
        return lease.deliveries, progress

    got, progress = engine_call(consume)
    assert [(d.partition, d.message.body) for d in got] == [
        (RETRY_PARTITION, b"x"),
        (RETRY_PARTITION, b"y"),
    ]
    assert [(r.ack_index, r.lag) for r in progress] == [(2, 0)]


def test_a_broadcast_consumers_clients_each_get_a_reconsumed_span(worker):
    """Without a client named, each registered client of a broadcast consumer gets the
    span into its own retries; naming one for a clustering consumer is refused when
    filed; the retries endpoint lists a client's own."""
    from brokers.engine import RETRY_PARTITION

    team = Team.objects.create(name="fan")
    topic = factories.topic("fan-topic", factories.cluster_with_brokers("fn"), team, 1, 1)
    app, _ = factories.app("fan-app", team)
    other, _ = factories.app("fan-other", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    ConsumerPolicy.objects.create(
        topic=topic, app=app, mode=ConsumerPolicy.Mode.BROADCAST, start_position="earliest"
    )
    ConsumerPolicy.objects.create(topic=topic, app=other)
    publish()
    from_ms = int(time.time() * 1000) - 1

    async def produce_and_consume(engine: Engine) -> None:
        await engine.append("fan-topic", "fan-app", [Message(b"x")], partition=0)
        for client in ("c1", "c2"):
            got = await engine.fetch("fan-topic", "fan-app", client_id=client, owner=client)
            await engine.ack(
                "fan-topic", "fan-app", 0, [0], client_id=client, owner=client, token=got.lock_token
            )

    engine_call(produce_and_consume)
    to_ms = int(time.time() * 1000) + 1
    alice, root = member_and_admin(team)
    refused = alice.post(
        "/api/v1/applications/",
        {
            "kind": "reconsume",
            "payload": {
                "consumer": "fan-other.fan-topic",
                "from_ms": from_ms,
                "to_ms": to_ms,
                "client_id": "c1",
            },
        },
        format="json",
    )
    assert refused.status_code == 400 and "client_id" in refused.json()["fields"]
    payload = {"consumer": "fan-app.fan-topic", "from_ms": from_ms, "to_ms": to_ms}
    result, state = _reconsumed(alice, root, payload)
    assert result["clients"] == ["c1", "c2"]
    assert state["copied"] == {"0": 2}  # one message for each of two clients
    listed = alice.get("/api/v1/consumers/fan-app.fan-topic/retries/", {"client_id": "c2"})
    assert listed.status_code == 200 and listed.json()["retries"] == 1
    assert alice.get("/api/v1/consumers/fan-app.fan-topic/retries/").json()["retries"] == 0
    assert (
        alice.get("/api/v1/consumers/fan-other.fan-topic/retries/", {"client_id": "c2"}).status_code
        == 404
    )

    async def consume(engine: Engine):
        out = {}
        for client in ("c1", "c2"):
            got = await engine.fetch("fan-topic", "fan-app", client_id=client, owner=client)
            out[client] = [(got.partition, d.message.body) for d in got.messages]
        return out

    assert engine_call(consume) == {
        "c1": [(RETRY_PARTITION, b"x")],
        "c2": [(RETRY_PARTITION, b"x")],
    }


def test_a_fan_out_queues_members_each_get_a_reconsumed_span(worker, client):
    """A fan-out queue's subscribers are members of its group, each with progress and
    retries of its own (as a broadcast consumer's clients): without a member named each
    gets the span, a member may be named, and the retries endpoint, the progress endpoint
    and the console's consumer page take a member as they take a broadcast client."""
    team = Team.objects.create(name="wide")
    topic = factories.topic("wide-topic", factories.cluster_with_brokers("wd"), team, 1, 1)
    topic.delivery_mode = "FanOutWithAck"
    topic.save()
    app, _ = factories.app("wide-app", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    ConsumerPolicy.objects.create(topic=topic, app=app)
    publish()
    from_ms = int(time.time() * 1000) - 1

    async def join_and_produce(engine: Engine) -> None:
        for member in ("x", "y"):  # what the VibeMQ server does for each subscriber
            await engine.join("wide-topic", "wide-app", member)
        await engine.append("wide-topic", "wide-app", [Message(b"w")], partition=0)

    engine_call(join_and_produce)
    to_ms = int(time.time() * 1000) + 1
    alice, root = member_and_admin(team)
    payload = {"consumer": "wide-app.wide-topic", "from_ms": from_ms, "to_ms": to_ms}
    result, state = _reconsumed(alice, root, payload)
    assert sorted(result["clients"]) == ["x", "y"]
    assert state["copied"] == {"0": 2}
    result, state = _reconsumed(alice, root, {**payload, "client_id": "y"})
    assert result["clients"] == ["y"] and state["copied"] == {"0": 1}
    retries = "/api/v1/consumers/wide-app.wide-topic/retries/"
    assert alice.get(retries, {"client_id": "x"}).json()["retries"] == 1
    assert alice.get(retries, {"client_id": "y"}).json()["retries"] == 2
    assert alice.get(retries).json()["retries"] == 0  # the group's own: none
    progress = alice.get("/api/v1/consumers/wide-app.wide-topic/progress/", {"client_id": "x"})
    assert progress.status_code == 200 and progress.json()[0]["lag"] == 1
    client.force_login(factories.user("wide-viewer", team=team))
    page = client.get("/consumers/wide-app.wide-topic/").content.decode()
    assert "Fan-out member" in page and '<option value="x"' in page and '<option value="y"' in page
