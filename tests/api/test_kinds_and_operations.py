"""Through /api/v1/: the producer_update and consumer_update kinds end to end, the schema
documenting every kind and action, and a consumer's retries and dead letters."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from rest_framework.test import APIClient

from brokers.catalog_loader import build_snapshot, publish
from brokers.engine import RETRY_PARTITION, Engine, Message, RetryType
from brokers.engine.keys import RetryKeys
from brokers.models import ConsumerPolicy, ProducerPolicy, Team, Topic
from mqcloud.approvals.models import AuditEvent, Kind
from proxy.httpmq.messages import delayed_message_id
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db(transaction=True)


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {factories.token_for(user)}")
    return client


@pytest.fixture
def world(redis_url):
    async def flush():
        client = aioredis.from_url(redis_url)
        await client.flushall()
        await client.aclose()

    asyncio.run(flush())
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    cluster = factories.cluster_with_brokers()
    topic = factories.topic("orders", cluster, red, partitions=1, groups=1)
    shop, _ = factories.app("shop", red)
    ProducerPolicy.objects.create(topic=topic, app=shop)
    ConsumerPolicy.objects.create(topic=topic, app=shop, start_position="earliest", err_times=1)
    blue_topic = factories.topic("blue-topic", cluster, blue, partitions=1, groups=1)
    blue_app, _ = factories.app("blue-app", blue)
    ConsumerPolicy.objects.create(topic=blue_topic, app=blue_app)
    publish()
    return {
        "alice": client_for(factories.user("alice", team=red)),
        "carol": client_for(factories.user("carol", team=red, role="admin")),
        "bob": client_for(factories.user("bob", team=blue)),
        "root": client_for(factories.user("root", admin=True)),
    }


def stored_keys(redis_url: str) -> list[bytes]:
    """Every key the engine keeps in Redis, sorted."""

    async def keys() -> list[bytes]:
        client = aioredis.from_url(redis_url)
        try:
            return sorted(await client.keys("mq:{*"))
        finally:
            await client.aclose()

    return asyncio.run(keys())


def dead_letter(topic: str, dead_letter_queue: str) -> None:
    """One message of ``topic`` fails for good (the topic keeps no retries) and is
    found in ``dead_letter_queue``."""

    async def fail(engine: Engine) -> None:
        await engine.append(topic, "shop", [Message(b"doomed")], partition=0)
        lease = await engine.lease(topic, "shop", count=1, owner="c")
        await engine.fail(topic, "shop", 0, [d.index for d in lease.deliveries])
        dead = await engine.lease(dead_letter_queue, "shop", count=5, owner="c")
        assert [d.message.body for d in dead.deliveries] == [b"doomed"]

    engine_call(fail)


def apply_and_approve(world, kind: str, payload: dict) -> dict:
    created = world["alice"].post(
        "/api/v1/applications/", {"kind": kind, "payload": payload}, format="json"
    )
    assert created.status_code == 201, created.json()
    approved = world["root"].post(f"/api/v1/applications/{created.json()['id']}/approve/")
    assert approved.status_code == 200
    return approved.json()


def test_producer_update_changes_blacklist_and_weights(world):
    bad = world["alice"].post(
        "/api/v1/applications/",
        {"kind": "producer_update", "payload": {"name": "shop.orders", "changes": {"app": "x"}}},
        format="json",
    )
    assert bad.status_code == 400 and "changes" in bad.json()["fields"]
    bad_ip = world["alice"].post(
        "/api/v1/applications/",
        {
            "kind": "producer_update",
            "payload": {"name": "shop.orders", "changes": {"blacklist": ["not-an-ip"]}},
        },
        format="json",
    )
    assert bad_ip.status_code == 400 and "blacklist" in bad_ip.json()["fields"]

    changes = {"blacklist": ["10.9.0.0/16"], "weights": {"1": 70, "2": 30}}
    done = apply_and_approve(world, "producer_update", {"name": "shop.orders", "changes": changes})
    assert done["status"] == "approved", done
    (policy,) = world["alice"].get("/api/v1/producer-policies/?app__code=shop").json()["results"]
    assert policy["blacklist"] == ["10.9.0.0/16"] and policy["weights"] == {"1": 70, "2": 30}
    # the engine's catalog carries the change too
    (producer,) = [p for p in build_snapshot().producers if p.app == "shop"]
    assert list(producer.blacklist) == ["10.9.0.0/16"]
    # a producer's rate limit changes by application too (it was fixed at creation)
    limited = {"name": "shop.orders", "changes": {"rate_limit": 500}}
    assert apply_and_approve(world, "producer_update", limited)["status"] == "approved"
    assert ProducerPolicy.objects.get(name="shop.orders").rate_limit == 500
    lifted = {"name": "shop.orders", "changes": {"rate_limit": None}}
    assert apply_and_approve(world, "producer_update", lifted)["status"] == "approved"
    assert ProducerPolicy.objects.get(name="shop.orders").rate_limit is None


def test_topic_update_refuses_fields_fixed_at_creation(world):
    """An application never shows a change that would not happen: partitions, code and
    cluster are fixed (read-only on the API's update), so asking for them is a 400."""
    for changes in ({"partitions": 8}, {"code": "other", "description": "x"}):
        bad = world["alice"].post(
            "/api/v1/applications/",
            {"kind": "topic_update", "payload": {"code": "orders", "changes": changes}},
            format="json",
        )
        assert bad.status_code == 400 and "cannot change" in bad.json()["fields"]["changes"][0]
    payload = {"code": "orders", "changes": {"description": "the shop's orders"}}
    done = apply_and_approve(world, "topic_update", payload)
    assert done["status"] == "approved", done
    topic = world["alice"].get("/api/v1/topics/orders/").json()
    assert topic["description"] == "the shop's orders" and topic["partitions"] == 1


def test_consumer_update_changes_blacklist_and_alert_rule(world):
    other_team = world["bob"].post(
        "/api/v1/applications/",
        {"kind": "consumer_update", "payload": {"name": "shop.orders", "changes": {}}},
        format="json",
    )
    assert other_team.status_code == 400 and "name" in other_team.json()["fields"]
    changes = {
        "blacklist": ["192.0.2.7"],
        "backlog_alert_enabled": True,
        "backlog_alert_count": 50,
        "backlog_alert_age_s": 30,
        "failure_alert_per_hour": 25,
    }
    done = apply_and_approve(world, "consumer_update", {"name": "shop.orders", "changes": changes})
    assert done["status"] == "approved" and done["result"]["backlog_alert_count"] == 50
    (policy,) = world["alice"].get("/api/v1/consumer-policies/?app__code=shop").json()["results"]
    assert policy["blacklist"] == ["192.0.2.7"]
    assert (policy["backlog_alert_count"], policy["backlog_alert_age_s"]) == (50, 30)
    assert policy["failure_alert_per_hour"] == 25
    back = {"failure_alert_per_hour": None}  # the platform's default again
    done = apply_and_approve(world, "consumer_update", {"name": "shop.orders", "changes": back})
    assert done["status"] == "approved" and done["result"]["failure_alert_per_hour"] is None
    bad = world["alice"].post(
        "/api/v1/applications/",
        {
            "kind": "consumer_update",
            "payload": {"name": "shop.orders", "changes": {"failure_alert_per_hour": -1}},
        },
        format="json",
    )
    assert bad.status_code == 400


def test_schema_documents_every_kind_action_and_operation(world):
    schema = world["alice"].get("/api/schema/?format=json").json()
    paths = schema["paths"]
    create = paths["/api/v1/applications/"]["post"]
    examples = create["requestBody"]["content"]["application/json"]["examples"]
    kinds = {e["value"]["kind"] for e in examples.values()}
    assert kinds == set(Kind.values)
    payload_doc = schema["components"]["schemas"]["Application"]["properties"]["payload"]
    for kind in Kind.values:
        assert f"`{kind}`" in payload_doc["description"]
    assert "weights" in payload_doc["description"] and "backlog_alert_count" in str(payload_doc)
    for action in ("approve", "reject", "cancel", "progress"):
        assert f"/api/v1/applications/{{id}}/{action}/" in paths
    assert "/api/v1/approval-settings/" in paths
    assert "/api/v1/apps/{code}/rotate-token/" in paths
    consumer = "/api/v1/consumers/{name}/"
    for tail in (
        "progress/",
        "failures/",
        "retries/",
        "retries/retry-now/",
        "retries/skip/",
        "dead-letters/",
        "dead-letters/skip/",
        "dead-letters/purge/",
    ):
        assert consumer + tail in paths, tail
    assert "/api/v1/topics/{code}/delayed/" in paths


async def _fail_three(engine: Engine) -> None:
    """Three messages fail once: with err_times=1 the retried ones die after one retry."""
    await engine.append("orders", "shop", [Message(b"m%d" % i) for i in range(3)], partition=0)
    got = await engine.fetch("orders", "shop", count=3, owner="c")
    acked = await engine.ack(
        "orders",
        "shop",
        0,
        [d.index for d in got.messages],
        retry_type=RetryType.EXCEPTION,
        owner="c",
        token=got.lock_token,
    )
    assert len(acked.retry_ids) == 3


def test_a_consumers_failures_and_those_its_send_back_limit_held_back(world):
    """What its consume-failure alert counts, for a monitoring job with an API token: the
    failures of a window and how many the topic's send-back limit held back."""
    base = "/api/v1/consumers/shop.orders/failures/"
    assert world["alice"].get(base).json() == {"minutes": 60, "failures": 0, "held_back": 0}
    engine_call(_fail_three)
    assert world["alice"].get(base).json() == {"minutes": 60, "failures": 3, "held_back": 0}
    Topic.objects.filter(code="orders").update(send_back_limit=1)
    publish()

    async def fail_more(engine: Engine) -> None:
        await engine.append("orders", "shop", [Message(b"x")] * 6, partition=0)
        for _ in range(2):  # a full bucket lets the first run by, owing; the next is held
            got = await engine.fetch("orders", "shop", count=3, owner="c")
            await engine.ack(
                "orders", "shop", 0, [d.index for d in got.messages],
                retry_type=RetryType.EXCEPTION, owner="c", token=got.lock_token,
            )  # fmt: skip

    engine_call(fail_more)
    assert world["alice"].get(base).json() == {"minutes": 60, "failures": 9, "held_back": 3}
    now = world["alice"].get(base, {"minutes": "0"}).json()  # the current minute only
    assert now["minutes"] == 0 and now["held_back"] in (0, 3) and now["failures"] <= 9
    for bad in ("-1", "1441", "x", ""):
        assert world["alice"].get(base, {"minutes": bad}).status_code == 400, bad
    assert world["alice"].get(base, {"since": "1"}).status_code == 400  # not a parameter
    assert world["bob"].get(base).status_code == 404  # another team's consumer
    assert world["alice"].get("/api/v1/consumers/none.orders/failures/").status_code == 404


def test_retries_and_dead_letters_listed_and_acted_on(world):
    engine_call(_fail_three)
    base = "/api/v1/consumers/shop.orders"
    listed = world["alice"].get(f"{base}/retries/").json()
    assert (listed["retries"], listed["dead_letters"]) == (3, 0)
    ids = [r["id"] for r in listed["results"]]
    assert [r["index"] for r in listed["results"]] == [0, 1, 2]
    assert (
        world["alice"].get(f"{base}/retries/?limit=1&offset=1").json()["results"][0]["id"]
        == (ids[1])
    )
    assert world["alice"].get(f"{base}/retries/?limit=x").status_code == 400
    assert world["alice"].get(f"{base}/retries/?limit=%C2%B2").status_code == 400  # "²"
    assert world["bob"].get(f"{base}/retries/").status_code == 404  # another team's

    # a member reads, only team admins act
    assert (
        world["alice"].post(f"{base}/retries/skip/", {"ids": ids[:1]}, format="json").status_code
        == 403
    )
    assert (
        world["carol"].post(f"{base}/retries/skip/", {"ids": []}, format="json").status_code == 400
    )
    assert (
        world["carol"].post(f"{base}/retries/skip/", {"ids": ["a"]}, format="json").status_code
        == 400
    )
    skipped = world["carol"].post(f"{base}/retries/skip/", {"ids": ids[:1]}, format="json")
    assert skipped.status_code == 200 and skipped.json() == {"count": 1}
    now = world["carol"].post(f"{base}/retries/retry-now/", {"ids": ids[1:]}, format="json")
    assert now.json() == {"count": 2}

    # the two due retries fail again and die (err_times=1)
    async def fail_retries(engine: Engine) -> None:
        got = await engine.fetch("orders", "shop", count=5, owner="c")
        assert got.partition == RETRY_PARTITION, got
        await engine.ack(
            "orders",
            "shop",
            RETRY_PARTITION,
            [d.index for d in got.messages],
            retry_type=RetryType.EXCEPTION,
        )

    engine_call(fail_retries)
    dead = world["alice"].get(f"{base}/dead-letters/").json()
    assert (dead["retries"], dead["dead_letters"]) == (0, 2)
    dead_ids = [r["id"] for r in dead["results"]]
    one = world["root"].post(f"{base}/dead-letters/skip/", {"ids": dead_ids[:1]}, format="json")
    assert one.json() == {"count": 1}
    assert world["alice"].post(f"{base}/dead-letters/purge/").status_code == 403
    assert world["carol"].post(f"{base}/dead-letters/purge/").json() == {"count": 1}
    assert world["alice"].get(f"{base}/dead-letters/").json()["dead_letters"] == 0

    actions = list(
        AuditEvent.objects.filter(target="consumer:shop.orders")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["retry-skip", "retry-resend", "dlq-skip", "dlq-purge"]


def test_consumer_progress_endpoint(world):
    async def produce_and_take(engine: Engine) -> None:
        await engine.append("orders", "shop", [Message(b"a"), Message(b"b")], partition=0)
        got = await engine.fetch("orders", "shop", count=1, owner="c", address="10.0.0.9:1")
        await engine.ack("orders", "shop", 0, [got.messages[0].index], owner="c")

    engine_call(produce_and_take)
    (row,) = world["alice"].get("/api/v1/consumers/shop.orders/progress/").json()
    assert (row["partition"], row["max_index"], row["ack_index"], row["lag"]) == (0, 2, 1, 1)
    assert row["last_address"].startswith("10.0.0.9")
    # A clustering consumer has no per-client progress.
    bad = world["alice"].get("/api/v1/consumers/shop.orders/progress/?client_id=x")
    assert bad.status_code == 404 and bad.json()["error"] == "not_found"
    too_long = world["alice"].get(f"/api/v1/consumers/shop.orders/progress/?client_id={'x' * 129}")
    assert too_long.status_code == 400 and "client_id" in too_long.json()["fields"]
    assert world["alice"].get("/api/v1/consumers/blue-app.blue-topic/progress/").status_code == 404


def test_topic_delete_erases_its_data_and_no_other_topics(world, redis_url):
    """A deleted topic's messages, progress, retries, delayed messages and bookkeeping go
    with it. They stayed in Redis for good: a topic created later under the same code
    found its messages, dead letters and progress. A topic whose code starts the same
    keeps everything."""
    orders = Topic.objects.get(code="orders")
    cluster, red = orders.cluster, orders.team
    shop = ProducerPolicy.objects.get(topic=orders).app
    neighbour = factories.topic("orders.v2", cluster, red, partitions=1, groups=1)
    ProducerPolicy.objects.create(topic=neighbour, app=shop)
    publish()

    async def fill(engine: Engine) -> None:
        await _fail_three(engine)
        await engine.append_delayed(
            "orders", "shop", Message(b"later"), deliver_at_ms=engine.now_ms() + 60_000
        )
        await engine.append("orders.v2", "shop", [Message(b"kept")], partition=0)

    engine_call(fill)
    ProducerPolicy.objects.filter(topic=orders).delete()
    ConsumerPolicy.objects.filter(topic=orders).delete()
    result = apply_and_approve(world, "topic_delete", {"code": "orders"})
    assert result["status"] == "approved", result
    assert result["result"]["deleted"] == "orders" and result["result"]["erased_keys"] > 5

    left = stored_keys(redis_url)
    assert not [k for k in left if b":orders:" in k or b":orders}" in k], left
    assert any(b"orders.v2" in k for k in left)

    again = factories.topic("orders", cluster, red, partitions=1, groups=1)
    ProducerPolicy.objects.create(topic=again, app=shop)
    ConsumerPolicy.objects.create(topic=again, app=shop, start_position="earliest")
    publish()

    async def fresh(engine: Engine) -> tuple:
        return (
            await engine.bounds("orders", 0),
            await engine.delayed_pending("orders"),
            [d.message.body for d in await engine.read("orders.v2", 0, 0, 10)],
        )

    assert engine_call(fresh) == ((0, 0), 0, [b"kept"])
    listed = world["alice"].get("/api/v1/consumers/shop.orders/retries/").json()
    assert (listed["retries"], listed["dead_letters"]) == (0, 0)


def test_a_deleted_queue_topic_takes_its_dead_letter_queue_along(world, redis_url):
    """``<topic>.dlq`` has no catalog row: its dead letters stayed in Redis when the topic
    went, and a topic created again under the code, with its DLQ on, listed them. A
    catalog topic that happens to be named ``<other>.dlq`` is another topic: kept."""
    orders = Topic.objects.get(code="orders")
    orders.dead_letter_enabled, orders.max_retry_attempts = True, 0
    orders.save()
    factories.topic("other", orders.cluster, orders.team, partitions=1, groups=1)
    named = factories.topic("other.dlq", orders.cluster, orders.team, partitions=1, groups=1)
    shop = ProducerPolicy.objects.get(topic=orders).app
    ProducerPolicy.objects.create(topic=named, app=shop)
    publish()

    dead_letter("orders", "orders.dlq")
    engine_call(lambda e: e.append("other.dlq", "shop", [Message(b"its own")], partition=0))
    ProducerPolicy.objects.filter(topic__in=[orders]).delete()
    ConsumerPolicy.objects.filter(topic=orders).delete()
    assert apply_and_approve(world, "topic_delete", {"code": "orders"})["status"] == "approved"
    assert apply_and_approve(world, "topic_delete", {"code": "other"})["status"] == "approved"

    left = stored_keys(redis_url)
    assert not [k for k in left if b"orders.dlq" in k], left
    assert any(b"other.dlq" in k for k in left)


def test_a_named_dead_letter_queue_goes_with_its_topic_through_the_api(world, redis_url):
    orders = Topic.objects.get(code="orders")
    orders.dead_letter_enabled, orders.max_retry_attempts = True, 0
    orders.dead_letter_queue = "orders-graves"
    orders.save()
    publish()

    dead_letter("orders", "orders-graves")
    ProducerPolicy.objects.filter(topic=orders).delete()
    ConsumerPolicy.objects.filter(topic=orders).delete()
    assert world["root"].delete("/api/v1/topics/orders/").status_code == 204  # platform admins

    assert not [k for k in stored_keys(redis_url) if b"orders" in k]


def test_a_platform_admin_deleting_a_topic_erases_its_data(world, redis_url):
    orders = Topic.objects.get(code="orders")
    factories.topic("spare", orders.cluster, orders.team, partitions=2, groups=1)
    publish()

    async def keys(*set_first: str) -> list[bytes]:
        client = aioredis.from_url(redis_url)
        try:
            for key in set_first:
                await client.set(key, b"left behind")
            return sorted(await client.keys("mq:{?:spare*"))
        finally:
            await client.aclose()

    assert len(asyncio.run(keys("mq:{t:spare:1}:m", "mq:{r:spare:shop}:due"))) >= 2
    assert world["alice"].delete("/api/v1/topics/spare/").status_code == 403
    assert world["root"].delete("/api/v1/topics/spare/").status_code == 204
    assert asyncio.run(keys()) == []
    assert not Topic.objects.filter(code="spare").exists()


def test_consumer_delete_erases_its_group_and_a_new_one_starts_fresh(world):
    """A deleted consumer's progress, retries and dead letters go with it: a policy
    created later for the same app started where the old one was, its retries due."""
    engine_call(_fail_three)
    result = apply_and_approve(world, "consumer_delete", {"name": "shop.orders"})
    assert result["status"] == "approved", result
    assert result["result"]["erased_keys"] > 0
    orders = Topic.objects.get(code="orders")
    shop = ProducerPolicy.objects.get(topic=orders).app
    ConsumerPolicy.objects.create(topic=orders, app=shop, start_position="earliest")
    publish()
    listed = world["alice"].get("/api/v1/consumers/shop.orders/retries/").json()
    assert (listed["retries"], listed["dead_letters"]) == (0, 0)

    async def fetch_all(engine: Engine) -> list[bytes]:
        got = await engine.fetch("orders", "shop", count=10, owner="new")
        return [d.message.body for d in got.messages]

    assert engine_call(fetch_all) == [b"m0", b"m1", b"m2"]  # from its start position


def test_a_platform_admin_deleting_a_consumer_policy_erases_its_group(world):
    engine_call(_fail_three)
    policy = ConsumerPolicy.objects.get(name="shop.orders")
    assert world["alice"].delete(f"/api/v1/consumer-policies/{policy.pk}/").status_code == 403
    assert world["root"].delete(f"/api/v1/consumer-policies/{policy.pk}/").status_code == 204

    async def retries(engine: Engine) -> int:
        return await engine.redis.exists(RetryKeys("orders", "shop").due)

    assert engine_call(retries) == 0


def test_delayed_messages_listed_and_cancelled_by_application(world):
    now = int(time.time() * 1000)

    async def hold(engine: Engine) -> list[int]:
        return [
            (
                await engine.append_delayed(
                    "orders", "shop", Message(b"t%d" % i), deliver_at_ms=now + (i + 1) * 3_600_000
                )
            ).delay_id
            for i in range(3)
        ]

    ids = engine_call(hold)
    url = "/api/v1/topics/orders/delayed/"
    listed = world["alice"].get(url).json()
    assert listed["count"] == 3 and [r["delay_id"] for r in listed["results"]] == ids
    first = listed["results"][0]
    assert first["message_id"] == delayed_message_id("orders", ids[0])
    assert first["app"] == "shop" and first["partition"] == 0 and first["body_preview"] == "t0"
    assert [r["delay_id"] for r in world["alice"].get(url, {"id": first["message_id"]}).json()[
        "results"
    ]] == [ids[0]]  # fmt: skip
    assert world["alice"].get(url, {"id": "999"}).json() == {"count": 0, "results": []}
    assert world["alice"].get(url, {"id": "nope"}).status_code == 400
    page = world["alice"].get(url, {"offset": 1, "limit": 1}).json()
    assert page["count"] == 3 and [r["delay_id"] for r in page["results"]] == [ids[1]]
    window = world["alice"].get(url, {"due_from": now + 5_000_000, "due_until": now + 99_000_000})
    assert [r["delay_id"] for r in window.json()["results"]] == ids[1:]
    assert world["alice"].get(url, {"due_from": 10, "due_until": 5}).json()["count"] == 0
    assert world["alice"].get(url, {"limit": 0}).status_code == 400
    assert world["bob"].get(url).status_code == 404

    # cancelling: an application of the topic's team
    for bad in (
        {"topic": "orders", "ids": []},
        {"topic": "orders", "ids": ["x"]},
        {"topic": "orders"},
    ):
        refused = world["alice"].post(
            "/api/v1/applications/", {"kind": "timer_cancel", "payload": bad}, format="json"
        )
        assert refused.status_code == 400, bad
    other = world["bob"].post(
        "/api/v1/applications/",
        {"kind": "timer_cancel", "payload": {"topic": "orders", "ids": [ids[0]]}},
        format="json",
    )
    assert other.status_code == 400 and "No such object" in str(other.json()), other.json()
    done = apply_and_approve(
        world, "timer_cancel", {"topic": "orders", "ids": [ids[2], ids[0], 77]}
    )
    assert done["status"] == "approved", done
    assert done["result"] == {"cancelled": 2, "not_held": [77]}
    assert [r["delay_id"] for r in world["alice"].get(url).json()["results"]] == [ids[1]]
