"""In Chromium against a live daphne: alice stars a topic from the topic list (htmx swaps
the button in place) and finds it on her dashboard; she sends feedback from a page, root
answers it, and alice reads the answer; root posts an announcement that alice sees as a
banner and hides."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from playwright.sync_api import Page, expect

from brokers.catalog_loader import publish
from brokers.models import Cluster
from tests import factories
from tests.browser.test_console_e2e import login, people  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def topic(people):  # noqa: F811
    def make() -> None:
        try:
            factories.topic("starry", Cluster.objects.get(name="main"), people, 1, 1)
            publish()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(make).result()


def test_star_feedback_and_announcements(page: Page, console_url, topic):
    base = console_url
    page.set_default_timeout(10_000)
    login(page, base, "alice")
    page.goto(f"{base}/topics/")
    star = page.get_by_role("button", name="Star starry")
    star.click()  # htmx: the form is swapped in place, no navigation
    expect(page.get_by_role("button", name="Starred starry")).to_have_attribute(
        "aria-pressed", "true"
    )
    page.get_by_role("link", name="Dashboard").click()
    expect(page.locator("#favorites")).to_contain_text("starry")

    page.goto(f"{base}/topics/starry/")
    page.get_by_role("link", name="Feedback").click()
    page.get_by_label("Your feedback").fill("Please show the lag per partition here.")
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".flash")).to_contain_text("went to the platform admins")
    expect(page.locator("tbody")).to_contain_text("from /topics/starry/")

    login(page, base, "root")
    page.goto(f"{base}/feedback/")
    answer = page.locator("form.feedback-answer").first
    answer.locator("textarea").fill("It is on the consumer page.")
    answer.get_by_role("button", name="Answer").click()
    expect(page.locator(".flash")).to_contain_text("answered")
    page.goto(f"{base}/announcements/")
    page.locator("#id_text").fill("Upgrade on Sunday 06:00 UTC.")
    page.locator("#id_level").select_option("warning")
    page.get_by_role("button", name="Post").click()
    expect(page.locator(".announcement")).to_contain_text("Upgrade on Sunday")

    login(page, base, "alice")
    expect(page.locator(".announcement")).to_contain_text("Upgrade on Sunday")
    page.get_by_role("link", name="Feedback").click()
    expect(page.locator("tbody")).to_contain_text("It is on the consumer page.")
    page.locator(".announcement").get_by_role("button", name="Hide").click()
    expect(page.locator(".announcement")).to_have_count(0)
    expect(page.get_by_role("heading", name="Feedback", exact=True)).to_be_visible()  # stays
