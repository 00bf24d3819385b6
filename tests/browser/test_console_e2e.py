"""End to end in Chromium against a live daphne and a real Celery worker: a member applies
for a topic and a consumer, an admin approves, messages flow through the engine, the topic
page charts them, the consumer page shows the lag live, an offset reset runs to 100%."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis.asyncio as aioredis
from django.conf import settings
from playwright.sync_api import Page, expect

from brokers.catalog_loader import build_snapshot
from brokers.engine import Engine, Message
from brokers.models import ConsumerPolicy, Team, TeamMembership, Topic
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "pw-Secret-123"


def engine_call(fn):
    """Run ``fn(engine)`` in a thread of its own (Playwright holds this thread's loop)."""
    snapshot = build_snapshot()

    async def run():
        client = aioredis.from_url(settings.REDIS_URL)
        engine = Engine(client, lambda: snapshot)
        try:
            return await fn(engine)
        finally:
            await engine.close()
            await client.aclose()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


@pytest.fixture
def people(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    red = Team.objects.create(name="red")
    factories.cluster_with_brokers("main")
    factories.app("shop", red)
    alice = factories.user("alice", team=red)
    TeamMembership.objects.filter(user=alice).update(role="member")
    factories.user("root", admin=True)
    return red


def login(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}/logout-page-does-not-exist")  # any page; then clear the session
    page.context.clear_cookies()
    page.goto(f"{base}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


def approve_first_pending(page: Page, base: str) -> None:
    page.goto(f"{base}/applications/queue/")
    page.get_by_role("button", name=re.compile(r"^Approve #")).first.click()
    expect(page.locator(".flash")).to_contain_text("approved")


def test_apply_approve_produce_watch_lag_and_reset(page: Page, console_url, people, celery_worker):
    base = console_url
    page.set_default_timeout(10_000)
    login(page, base, "alice")
    # apply for a topic, with an inline error first
    page.goto(f"{base}/applications/new/?kind=topic_create")
    page.get_by_role("button", name="Submit application").click()
    expect(page.locator("small.error").first).to_be_visible()
    page.locator("#id_code").fill("e2e-orders")
    page.locator("#id_partitions").fill("2")
    page.get_by_role("button", name="Submit application").click()
    expect(page.locator("#application-status")).to_have_text("Pending")

    login(page, base, "root")
    approve_first_pending(page, base)

    login(page, base, "alice")
    page.goto(f"{base}/topics/")
    page.get_by_role("link", name="e2e-orders").click()
    expect(page.get_by_role("heading", name="Topic e2e-orders")).to_be_visible()
    # apply to consume and produce, from the topic page's links
    page.get_by_role("button", name="Apply to consume").click()
    page.locator("#id_start_position").select_option("earliest")
    page.get_by_role("button", name="Submit application").click()
    expect(page.locator("#application-status")).to_have_text("Pending")
    page.goto(f"{base}/applications/new/?kind=producer_create&topic=e2e-orders")
    page.get_by_role("button", name="Submit application").click()
    expect(page.locator("#application-status")).to_have_text("Pending")

    login(page, base, "root")
    approve_first_pending(page, base)
    approve_first_pending(page, base)
    assert ConsumerPolicy.objects.filter(name="shop.e2e-orders").exists()

    # messages through the engine; the topic page charts them
    engine_call(
        lambda e: e.append(
            "e2e-orders", "shop", [Message(b"m%d" % i) for i in range(6)], partition=0
        )
    )
    login(page, base, "alice")
    page.goto(f"{base}/topics/e2e-orders/")
    expect(page.locator("#traffic-summary")).to_contain_text("6 produced")

    # the consumer page shows the lag, and updates it live when a consumer acks
    page.goto(f"{base}/consumers/shop.e2e-orders/")
    expect(page.locator("#total-lag")).to_have_text("6")

    async def consume_two(engine):
        got = await engine.fetch("e2e-orders", "shop", count=2, owner="e2e", address="10.9.8.7:1")
        await engine.ack("e2e-orders", "shop", got.partition, [0, 1])

    engine_call(consume_two)
    expect(page.locator("#total-lag")).to_have_text("4", timeout=10_000)
    expect(page.locator("#consumer-progress")).to_contain_text("10.9.8.7")

    # an offset reset to the latest: applied, approved, progress bar to 100 %, lag 0
    page.get_by_role("button", name="Reset offsets").click()
    page.locator("#id_position").select_option("latest")
    page.get_by_role("button", name="Submit application").click()
    reset_url = page.url
    login(page, base, "root")
    approve_first_pending(page, base)
    login(page, base, "alice")
    page.goto(reset_url)
    expect(page.locator("#operation-progress")).to_have_attribute(
        "data-percent", "100", timeout=30_000
    )
    expect(page.locator("#operation-progress progress")).to_have_attribute("value", "100")
    page.goto(f"{base}/consumers/shop.e2e-orders/")
    expect(page.locator("#total-lag")).to_have_text("0")
    assert Topic.objects.get(code="e2e-orders").creator == "alice"
