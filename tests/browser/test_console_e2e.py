"""End to end in Chromium against a live daphne and a real Celery worker: a member applies
for a topic, a consumer and open zbus access, an admin approves, the topic list marks the
topic open, messages flow through the engine, the topic page charts them, the consumer page
shows the lag live, an offset reset runs to 100%; a pause approved in the queue stops
delivery within a second, and a resume restarts it; an application form is completed with
the keyboard alone."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis.asyncio as aioredis
from django.conf import settings
from django.db import connection
from playwright.sync_api import Page, expect

from brokers.catalog_loader import publish
from brokers.engine import CatalogWatcher, Engine, FetchStatus, Message
from brokers.models import App, Cluster, ConsumerPolicy, ProducerPolicy, Team, TeamMembership, Topic
from mqcloud.approvals.models import Application
from pipeline.models import ConsumerLag
from tests import factories
from tests.engine_calls import engine_call as shared_engine_call

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "pw-Secret-123"


def engine_call(fn):
    """:func:`tests.engine_calls.engine_call` in a thread of its own (Playwright holds this
    thread's loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(shared_engine_call, fn).result()


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


def chart_note(page: Page, canvas: str):
    """The sentence a chart shows instead of itself when it has no sample."""
    return page.locator(f"#{canvas}").locator("xpath=..").locator(".chart-empty")


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
    # and to open it to token-less zbus clients, with the topic page's button
    page.goto(f"{base}/topics/e2e-orders/")
    expect(page.locator("#zbus-access")).to_contain_text("Closed: zbus clients need an app")
    page.get_by_role("button", name="Apply to open zbus access").click()
    expect(page.locator("#application-status")).to_have_text("Pending")

    login(page, base, "root")
    for _ in range(3):
        approve_first_pending(page, base)
    assert ConsumerPolicy.objects.filter(name="shop.e2e-orders").exists()

    # messages through the engine; the topic page charts them
    engine_call(
        lambda e: e.append(
            "e2e-orders", "shop", [Message(b"m%d" % i) for i in range(6)], partition=0
        )
    )
    login(page, base, "alice")
    page.goto(f"{base}/topics/")
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="e2e-orders"))
    expect(row.locator("mark.badge-open")).to_have_text("zbus open")
    page.goto(f"{base}/topics/e2e-orders/")
    expect(page.locator("#zbus-access")).to_contain_text("Open to token-less zbus clients")
    expect(page.locator("#traffic-summary")).to_contain_text("6 produced")
    # no rollup has run: the latency chart says so instead of drawing nothing
    expect(chart_note(page, "chart-latency")).to_contain_text("No latency samples in this window")
    expect(chart_note(page, "chart-count")).to_be_hidden()

    # the consumer page shows the lag, and updates it live when a consumer acks
    page.goto(f"{base}/consumers/shop.e2e-orders/")
    expect(page.locator("#total-lag")).to_have_text("6")
    expect(chart_note(page, "chart-lag")).to_contain_text("No lag samples in this window")
    # two lone samples (the rollup samples every few minutes) are drawn as two points
    minute = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    for ago, lag in ((0, 6), (3, 2)):
        ConsumerLag.objects.create(
            topic="e2e-orders", app="shop", minute=minute - dt.timedelta(minutes=ago), lag=lag
        )
    page.reload()
    expect(page.locator("#lag-summary")).to_contain_text("2 samples in the window")
    expect(chart_note(page, "chart-lag")).to_be_hidden()
    drawn = page.evaluate(
        "() => Chart.getChart('chart-lag').getDatasetMeta(0).data"
        ".filter((p) => p.options.radius > 0).length"
    )
    assert drawn == 2

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


class LiveEngine:
    """An engine that follows the published catalog like a broker process does (its own
    event loop in a thread, a CatalogWatcher whose periodic resync is far slower than the
    one second a pause has to take, so only the pub/sub invalidation can make it)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self._start)

    async def _start(self) -> None:
        self.client = aioredis.from_url(settings.REDIS_URL)
        self.watcher = CatalogWatcher(self.client, resync_interval=30.0)
        await self.watcher.start()
        self.engine = Engine(self.client, lambda: self.watcher.current)

    async def _stop(self) -> None:
        await self.watcher.stop()
        await self.engine.close()
        await self.client.aclose()

    def call(self, fn):
        """Run the coroutine function ``fn()`` on the engine's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout=10)

    def fetch_one(self):
        """Fetch one message as consumer 'shop' and ack it; the fetch result."""

        async def run():
            got = await self.engine.fetch(
                "e2e-pause", "shop", count=1, owner="e2e", address="10.1.2.3:4"
            )
            if got.status is FetchStatus.FOUND:
                indexes = [d.index for d in got.messages]
                await self.engine.ack("e2e-pause", "shop", got.partition, indexes, owner="e2e")
            return got

        return self.call(run)

    def close(self) -> None:
        self.call(self._stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


@pytest.fixture
def pause_catalog(people) -> None:
    """A topic 'e2e-pause' with a producer and an earliest consumer of app 'shop', published."""

    def make_catalog() -> None:  # a consumer's creation signal calls async_to_sync
        try:
            topic = factories.topic("e2e-pause", Cluster.objects.get(name="main"), people, 1, 1)
            shop = App.objects.get(code="shop")
            ProducerPolicy.objects.create(topic=topic, app=shop)
            ConsumerPolicy.objects.create(topic=topic, app=shop, start_position="earliest")
            publish()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(make_catalog).result()


@pytest.fixture
def live_engine(pause_catalog) -> Iterator[LiveEngine]:
    """An engine following the published catalog, with the 'e2e-pause' topic in it."""
    live = LiveEngine()
    yield live
    live.close()


def fetch_until(live: LiveEngine, status: FetchStatus, within_s: float = 1.0):
    """Fetch until the result has ``status``; fails when ``within_s`` passes first."""
    deadline = time.monotonic() + within_s
    while True:
        got = live.fetch_one()
        if got.status is status:
            return got
        assert time.monotonic() < deadline, f"still {got.status.value} after {within_s} s"
        time.sleep(0.02)


def decide_in_queue(page: Page, base: str) -> None:
    """The admin approves the only pending application in the queue."""
    login(page, base, "root")
    approve_first_pending(page, base)


def test_pause_stops_delivery_within_a_second_and_resume_restarts_it(
    page: Page, console_url, live_engine: LiveEngine
):
    base = console_url
    page.set_default_timeout(10_000)
    live_engine.call(
        lambda: live_engine.engine.append(
            "e2e-pause", "shop", [Message(b"p%d" % i) for i in range(5)], partition=0
        )
    )
    first = fetch_until(live_engine, FetchStatus.FOUND)
    assert [d.index for d in first.messages] == [0]

    login(page, base, "alice")
    page.goto(f"{base}/consumers/shop.e2e-pause/")
    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#id_consumer")).to_have_value("shop.e2e-pause")
    page.get_by_role("button", name="Submit application").click()
    expect(page.locator("#application-status")).to_have_text("Pending")
    assert live_engine.fetch_one().status is FetchStatus.FOUND  # not paused until approved

    decide_in_queue(page, base)
    fetch_until(live_engine, FetchStatus.PAUSED)
    # paused, not drained: messages are waiting and stay undelivered
    (row,) = live_engine.call(lambda: live_engine.engine.progress("e2e-pause", "shop"))
    assert row.max_index - row.ack_index == 3
    assert live_engine.fetch_one().status is FetchStatus.PAUSED

    login(page, base, "alice")
    page.goto(f"{base}/consumers/shop.e2e-pause/")
    expect(page.locator("hgroup")).to_contain_text("paused")
    page.get_by_role("button", name="Resume").click()
    page.get_by_role("button", name="Submit application").click()
    expect(page.locator("#application-status")).to_have_text("Pending")
    assert live_engine.fetch_one().status is FetchStatus.PAUSED

    decide_in_queue(page, base)
    resumed = fetch_until(live_engine, FetchStatus.FOUND)
    assert [d.index for d in resumed.messages] == [2]
    assert ConsumerPolicy.objects.get(name="shop.e2e-pause").paused is False


def tab_to(page: Page, selector: str, limit: int = 80) -> None:
    """Press Tab until the focused element matches ``selector`` (keyboard only)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("s => document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def press_and_load(page: Page, key: str) -> None:
    """Press ``key`` on the focused link or form and wait for the page it loads."""
    with page.expect_navigation():
        page.keyboard.press(key)


def focus_outline(page: Page) -> str:
    return page.evaluate(
        "() => { const s = getComputedStyle(document.activeElement);"
        " return s.outlineStyle + ' ' + s.outlineWidth; }"
    )


def test_application_form_completed_with_the_keyboard_only(page: Page, console_url, pause_catalog):
    base = console_url
    page.set_default_timeout(10_000)
    page.goto(f"{base}/login/")
    tab_to(page, "#id_username")
    page.keyboard.type("alice")
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    press_and_load(page, "Enter")
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()

    page.keyboard.press("Tab")  # the first stop is the skip link, and focus shows
    assert page.evaluate("() => document.activeElement.className") == "skip-link"
    assert focus_outline(page) == "solid 3px"
    tab_to(page, 'nav a[href="/applications/"]')
    press_and_load(page, "Enter")
    expect(page.get_by_role("heading", name="Applications")).to_be_visible()
    tab_to(page, 'a[href="/applications/new/"]')
    press_and_load(page, "Enter")
    expect(page.get_by_role("heading", name="New application", exact=True)).to_be_visible()
    tab_to(page, 'a[href="?kind=rate_limit"]')
    press_and_load(page, "Enter")
    expect(page.get_by_role("heading", name="Set a consumer's rate limit")).to_be_visible()

    # a value out of range: the error shows inline, by the field
    tab_to(page, "#id_consumer")
    assert page.evaluate("() => document.activeElement.value") == "shop.e2e-pause"
    page.keyboard.press("Tab")
    page.keyboard.type("0")
    press_and_load(page, "Enter")  # implicit submission
    error = page.locator("#id_rate_limit ~ small.error")
    expect(error).to_contain_text("greater than or equal to 1")
    expect(page.locator("#id_rate_limit")).to_have_attribute("aria-invalid", "true")

    tab_to(page, "#id_rate_limit")
    page.keyboard.press("Control+A")
    page.keyboard.type("50")
    tab_to(page, 'button[type="submit"]:not(.outline)')
    assert focus_outline(page) == "solid 3px"
    press_and_load(page, "Enter")
    expect(page.locator("#application-status")).to_have_text("Pending")
    application = Application.objects.get(kind="rate_limit")
    assert application.payload == {"consumer": "shop.e2e-pause", "rate_limit": 50}
