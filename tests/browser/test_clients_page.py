"""The client inventory in Chromium: a platform admin follows the nav to Clients, sees
each kind of client with its app, narrows the list to one protocol with the select, and
follows the app's link to its hosts."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import Page, expect

from brokers.catalog_loader import publish
from brokers.models import ProducerPolicy, Team
from tests import factories
from tests.client_rows import put_client

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "pw-Secret-123"


def connected(address: str, *kind: str) -> None:
    """A connected client of 'shop' that produced to 'orders' (in a thread of its own:
    Playwright holds this thread's loop)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(put_client, address, "shop", "orders", kind).result()


def test_an_admin_finds_a_client_kind_and_its_app(page: Page, console_url, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    red = Team.objects.create(name="red")
    topic = factories.topic("orders", factories.cluster_with_brokers("main"), red, 1, 1)
    app, _ = factories.app("shop", red)
    ProducerPolicy.objects.create(topic=topic, app=app)
    factories.user("root", admin=True)
    publish()
    connected("10.3.0.1:4000", "jmq4", "JAVA", "4.2.3")
    connected("10.3.0.2:4000", "vibemq", "", "js-2.0")

    page.goto(f"{console_url}/login/")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("link", name="Clients", exact=True).click()
    rows = page.locator("#client-kinds tbody tr")
    expect(rows).to_have_count(2)
    page.get_by_label("Protocol").select_option("vibemq")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("js-2.0")
    expect(page).to_have_url(f"{console_url}/clients/?protocol=vibemq")
    rows.first.get_by_role("link", name="shop").click()
    clients = page.locator("#clients")
    expect(clients).to_contain_text("10.3.0.2")
    expect(clients).to_contain_text("vibemq · js-2.0")
    expect(clients).to_contain_text("orders produced")
