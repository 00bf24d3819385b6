"""The admin index page in Debian's Chromium: open it, produce from the address bar, watch
the unconsumed count change (zbus.md §11.3, issue 7)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from playwright.sync_api import Page, expect

from tests.browser.conftest import allow_sync_db, browser, page  # noqa: F401  (fixtures)
from tests.zbus.conftest import Broker_, build_catalog

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def _build(redis_url: str) -> None:
    try:
        build_catalog(redis_url)
    finally:
        connection.close()


@pytest.fixture
def threaded_broker(transactional_db, redis_url: str) -> Iterator[int]:
    """The catalog, and a zbus server on its own event loop thread: Playwright's sync API
    keeps a loop running in the test thread, where the catalog's signals cannot run."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(_build, redis_url).result()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    broker = Broker_(redis_url)
    asyncio.run_coroutine_threadsafe(broker.start(), loop).result(10)
    try:
        yield broker.port
    finally:
        asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_index_page_counts_a_message_produced_from_the_address_bar(
    page: Page,  # noqa: F811
    threaded_broker: int,
) -> None:
    base = f"http://127.0.0.1:{threaded_broker}"
    page.goto(f"{base}/")
    expect(page).to_have_title("ZBUS Admin")
    expect(page.locator("h1")).to_contain_text(
        f"ZBUS服务总线监控管理【127.0.0.1:{threaded_broker}】"
    )
    row = page.locator('tr[data-mq="orders"]')
    expect(row.locator("td.type")).to_have_text("queue, permanent")
    expect(row.locator("td.unconsumed")).to_have_text("0")
    other = page.context.new_page()
    other.goto(f"{base}/orders?cmd=produce&&body=hello")
    assert other.locator("body").inner_text().strip().isdigit()  # the broker time in ms
    expect(row.locator("td.unconsumed")).to_have_text("1", timeout=5000)
    expect(page.locator('tr[data-mq="news"] td.type')).to_have_text("pub/sub, permanent")
