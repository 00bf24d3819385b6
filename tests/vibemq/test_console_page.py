"""The console's VibeMQ page in Debian's Chromium: connect with an app token, publish, and
watch the delivery arrive over WebSocket."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests import factories
from tests.browser.conftest import allow_sync_db  # noqa: F401 - module-scoped, autouse

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def viewer(settings, catalog):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    from brokers.models import Team

    factories.user("viewer", team=Team.objects.get(name="team1"))
    return "viewer"


def test_console_page_publishes_and_shows_deliveries(catalog, viewer, page: Page, console_url):
    page.goto(f"{console_url}/login/")
    page.get_by_label("Username").fill(viewer)
    page.get_by_label("Password").fill("pw-Secret-123")
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{console_url}/vibemq/")
    expect(page.get_by_role("heading", name="VibeMQ live")).to_be_visible()
    page.get_by_label("App token").fill(catalog.token)
    page.get_by_label("Queue").fill("browser-demo")
    for _ in range(50):  # the web process picks up the test catalog within a resync
        page.get_by_role("button", name="Connect and subscribe").click()
        status = page.locator("#vmq-status")
        expect(status).not_to_have_text("connecting")
        if "subscribed" in (status.text_content() or ""):
            break
        page.wait_for_timeout(100)
    expect(page.locator("#vmq-status")).to_have_text("subscribed to browser-demo")
    page.get_by_label("Payload (JSON)").fill('{"order": 42}')
    page.get_by_label("Priority").select_option("high")
    page.get_by_role("button", name="Publish").click()
    row = page.locator("#vmq-deliveries tr").first
    expect(row).to_contain_text('{"order":42}')
    expect(row).to_contain_text("browser-demo")
    expect(page.locator("#vmq-status")).to_contain_text("published")
