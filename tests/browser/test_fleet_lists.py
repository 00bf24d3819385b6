"""A list of 10,000 topics in Chromium: page, search and sort on the server; htmx swaps
the list and the URL keeps the state (back/forward and a reload show the same view)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests import factories
from tests.fleet import build_fleet

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "pw-Secret-123"


@pytest.fixture
def fleet(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    build_fleet(10_000, rollup_minutes=1)
    factories.user("root", admin=True)


def codes(page: Page) -> list[str]:
    return page.locator("#list-main tbody tr[data-topic]").evaluate_all(
        "rows => rows.map(r => r.dataset.topic)"
    )


def test_page_search_and_sort_10000_topics(page: Page, console_url: str, fleet) -> None:
    page.goto(f"{console_url}/login/")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
    page.goto(f"{console_url}/topics/")
    expect(page.locator(".pager")).to_contain_text("1–50 of 10000")
    assert codes(page)[0] == "t00000" and len(codes(page)) == 50

    page.locator(".pager").get_by_role("link", name="Next →").click()
    expect(page).to_have_url(re.compile(r"/topics/\?page=2$"))
    expect(page.locator("#list-main tbody tr").first).to_have_attribute("data-topic", "t00050")

    page.locator(".pager").get_by_role("link", name="Last »").click()
    expect(page).to_have_url(re.compile(r"page=200$"))
    expect(page.locator("#list-main tbody tr").last).to_have_attribute("data-topic", "t09999")

    page.get_by_label("Search code or description").fill("t0420")
    expect(page).to_have_url(re.compile(r"q=t0420"))
    expect(page.locator(".pager")).to_contain_text("1–10 of 10 (filtered)")
    assert codes(page) == [f"t0420{i}" for i in range(10)]

    page.locator("#list-main thead").get_by_role("link", name=re.compile("^Code")).click()
    expect(page).to_have_url(re.compile(r"sort=-code"))
    expect(page.locator("#list-main tbody tr").first).to_have_attribute("data-topic", "t04209")
    expect(page.locator("th[aria-sort=descending]")).to_contain_text("Code")

    page.go_back()
    expect(page).not_to_have_url(re.compile(r"sort=-code"))
    expect(page.locator("#list-main tbody tr").first).to_have_attribute("data-topic", "t04200")
    page.go_forward()
    expect(page.locator("#list-main tbody tr").first).to_have_attribute("data-topic", "t04209")

    page.reload()  # the URL alone gives the same view: bookmarkable
    assert codes(page)[0] == "t04209" and len(codes(page)) == 10
    expect(page.get_by_label("Search code or description")).to_have_value("t0420")

    page.goto(f"{console_url}/topics/?team=fleet-blue&sort=-partitions&page=abc")
    expect(page.locator(".pager")).to_contain_text("1–50 of 5000 (filtered)")
    assert all(int(c[1:]) % 2 == 1 for c in codes(page))
