"""Take PNG screenshots of the console's main pages into docs/screenshots/.

Starts a throw-away PostgreSQL and Redis, migrates, seeds a small demo catalog and some
traffic through the engine, starts daphne and a Celery worker, and drives Debian's
Chromium with Playwright through the pages (including an offset reset's progress bar).
Everything started is stopped again. Usage: .venv/bin/python scripts/screenshots.py
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from localservices import PostgresServer, RedisServer, free_port, wait_for_port  # noqa: E402

PASSWORD = "demo-Password-1"


def seed() -> None:
    """A demo catalog: two teams, users, a cluster, topics, apps, a consumer with a backlog."""
    from django.contrib.auth import get_user_model

    from brokers.catalog_loader import publish
    from brokers.models import (
        App,
        Broker,
        Cluster,
        ConsumerPolicy,
        ProducerPolicy,
        Team,
        TeamMembership,
        Topic,
    )
    from brokers.topology import create_partition_groups
    from mqcloud.approvals import services

    users = get_user_model()
    red = Team.objects.create(name="payments")
    blue = Team.objects.create(name="logistics")
    alice = users.objects.create_user("alice", "alice@example.test", PASSWORD)
    TeamMembership.objects.create(team=red, user=alice, role="admin")
    users.objects.create_superuser("root", "root@example.test", PASSWORD)
    cluster = Cluster.objects.create(name="main", description="demo cluster")
    for bid in (1, 2, 3):
        Broker.objects.create(
            id=bid, cluster=cluster, host=f"10.0.0.{bid}", jmq4_port=50088, zbus_port=15555,
            vibemq_port=2925, status="up" if bid < 3 else "down", weight=100 * bid,
            writable=bid < 3,
        )  # fmt: skip
    Broker.objects.filter(id__in=[1, 2]).update(
        last_heartbeat=time.strftime("%Y-%m-%d %H:%M:%S+00:00", time.gmtime())
    )
    topics = {}
    for code, team, parts in (("orders", red, 4), ("refunds", red, 2), ("shipments", blue, 4)):
        topics[code] = Topic.objects.create(
            code=code, cluster=cluster, team=team, partitions=parts, description=f"{code} events"
        )
        create_partition_groups(topics[code], 2)
    shop = App.objects.create(code="shop", team=red, description="web shop")
    shop.issue_token()
    billing = App.objects.create(code="billing", team=red, description="billing service")
    billing.issue_token()
    ProducerPolicy.objects.create(topic=topics["orders"], app=shop, weights={"1": 100, "2": 50})
    ConsumerPolicy.objects.create(topic=topics["orders"], app=billing, start_position="earliest")
    ProducerPolicy.objects.create(topic=topics["refunds"], app=shop)
    publish()
    services.submit(
        alice,
        "topic_create",
        {"code": "invoices", "cluster": "main", "team": "payments", "partitions": 4},
    )
    services.submit(alice, "pause", {"consumer": "billing.orders"})


async def traffic() -> None:
    """Messages through the engine, some consumed, so charts and lag have something to show."""
    import redis.asyncio as aioredis
    from django.conf import settings

    from brokers.engine import Engine, Message, load_snapshot
    from brokers.protocols.vibemq import Publish
    from brokers.protocols.zbus import Message as ZbusMessage
    from brokers.protocols.zbus import RequestLine
    from brokers.servers.vibemq.messages import to_message
    from brokers.servers.zbus.stored import to_engine
    from proxy.httpmq.messages import HTTPMQ_EXTENSION

    client = aioredis.from_url(settings.REDIS_URL)
    snapshot = await load_snapshot(client)
    earlier = Engine(client, lambda: snapshot, clock=lambda: time.time() - 120)
    for i in range(30):  # two minutes ago: the topic list's produce rates
        await earlier.append("orders", "shop", [Message(b"early %d" % i)] * 10, partition=3)
    await earlier.close()
    engine = Engine(client, lambda: snapshot)
    zbus = ZbusMessage(
        start=RequestLine(), headers={"mq": "orders", "x-trace": "zb-7"}, body=b"zbus"
    )
    vibemq = Publish(id="vb-1", queue="orders", payload={"order": 99}, headers={"source": "mobile"})
    for message, address in (
        (to_engine(zbus), "10.2.0.5:51320"),
        (to_message(vibemq), "10.2.0.6:40211"),
        (
            Message(
                b"http", business_id="k-9", attributes={"KEYS": "k-9"}, extension=HTTPMQ_EXTENSION
            ),
            "10.2.0.7:33012",
        ),
    ):
        await engine.append("orders", "shop", [message], partition=0, client_address=address)
    for i in range(40):
        await engine.append(
            "orders",
            "shop",
            [Message(b'{"order": %d, "amount": 12.5}' % i, business_id=f"order-{i}")] * 5,
            partition=i % 4,
            client_address="10.1.0.3:50122",
        )
        await engine.append(
            "refunds",
            "shop",
            [Message(b"refund %d" % i)],
            partition=i % 2,
            client_address="10.1.0.3:50122",
        )
    got = await engine.fetch(
        "orders", "billing", count=10, owner="billing-1", address="10.1.0.7:40122"
    )
    await engine.ack("orders", "billing", got.partition, list(range(got.start, got.end)))
    await engine.fetch(
        "orders",
        "billing",
        count=5,
        ack_timeout_ms=600_000,
        owner="billing-2",
        address="10.1.0.8:40500",
    )
    await engine.close()
    await client.aclose()


def rollups() -> None:
    """What the dashboard's top lists read: the backlog check's recorded lags and ten
    minutes of traffic rollups (the pipeline's rollup job writes them in a deployment)."""
    from datetime import UTC, datetime, timedelta

    from mqcloud.alerts.backlog import check_backlogs
    from pipeline.models import TrafficMinute

    check_backlogs()
    last = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    TrafficMinute.objects.bulk_create(
        TrafficMinute(dimension="topic", name=name, minute=last - timedelta(minutes=m),
                      messages=per * (m + 3), bytes=per * (m + 3) * 40, latency_p50_ms=2,
                      latency_p99_ms=9)
        for name, per in (("orders", 37), ("refunds", 4), ("shipments", 12))
        for m in range(10)
    )  # fmt: skip


def shoot(base: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=os.environ.get("MQCLOUD_CHROMIUM", "/usr/bin/chromium"),
            args=["--headless", "--no-sandbox", "--disable-gpu"],
        )
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()

        def login(user: str) -> None:
            page.context.clear_cookies()
            page.goto(f"{base}/login/")
            page.locator("#id_username").fill(user)
            page.locator("#id_password").fill(PASSWORD)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_url(f"{base}/")

        def snap(name: str, url: str, wait: str | None = None) -> None:
            page.goto(f"{base}{url}")
            if wait:
                page.wait_for_selector(wait)
            page.wait_for_timeout(300)  # let charts finish drawing
            page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
            print("saved", name)

        login("root")
        snap("approvals-queue", "/applications/queue/")
        page.get_by_role("button", name="Approve #2").click()
        login("alice")
        snap("dashboard", "/")
        snap("topics", "/topics/")
        page.goto(f"{base}/topics/orders/")
        expect(page.locator("#traffic-summary")).to_contain_text("produced")
        snap("topic-detail", "/topics/orders/", "#traffic-summary:not(:empty)")
        snap("messages", "/topics/orders/messages/?mode=index&partition=0&start=0&count=15")
        snap("consumer-progress", "/consumers/billing.orders/")
        snap("consumers", "/consumers/?sort=-lag")
        page.goto(f"{base}/tokens/")
        page.get_by_label("Name").fill("nightly lag report")
        page.get_by_label("Expires").select_option("90")
        page.get_by_role("button", name="Create token").click()
        page.wait_for_selector("#new-token")
        page.screenshot(path=str(OUT / "api-tokens.png"), full_page=True)
        print("saved api-tokens")
        snap("clusters", "/clusters/")
        snap("apps", "/apps/shop/")
        snap("application-form", "/applications/new/?kind=offset_reset&consumer=billing.orders")
        page.locator("#id_position").select_option("earliest")
        page.get_by_role("button", name="Submit application").click()
        reset = page.url
        login("root")
        page.goto(reset)
        page.get_by_role("button", name="Approve").click()
        page.wait_for_selector('#operation-progress[data-percent="100"]', timeout=60_000)
        page.screenshot(path=str(OUT / "offset-reset-progress.png"), full_page=True)
        print("saved offset-reset-progress")
        snap("audit", "/audit/")
        browser.close()


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-shots-"))
    workdir.chmod(0o755)
    postgres, redis = (
        PostgresServer(workdir / "pg", free_port()),
        RedisServer(workdir / "redis", free_port()),
    )
    procs: list[subprocess.Popen] = []
    try:
        postgres.start()
        redis.start()
        env = {
            **os.environ,
            "DATABASE_URL": postgres.url,
            "REDIS_URL": redis.url,
            "DEBUG": "false",
            "DJANGO_SETTINGS_MODULE": "mqcloud.settings",
        }
        os.environ.update(env)
        for command in (["migrate", "-v0"], ["collectstatic", "--noinput", "-v0"]):
            subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True)
        import django

        django.setup()
        seed()
        asyncio.run(traffic())
        rollups()
        port = free_port()
        log = (workdir / "web.log").open("wb")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "mqcloud.asgi:application",
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "mqcloud",
                    "worker",
                    "--pool",
                    "solo",
                    "--without-mingle",
                    "--without-gossip",
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        wait_for_port(port)
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        shoot(f"http://127.0.0.1:{port}")
        return 0
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
        redis.stop()
        postgres.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
