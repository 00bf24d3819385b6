"""In Chromium against a live daphne: alice creates an API token in the console, a script
lists her team's consumers with their lag through the API with it, alice revokes it in
the console, and the script's next call gets 401."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from playwright.sync_api import Page, expect

from brokers.catalog_loader import publish
from brokers.engine import Message
from brokers.models import App, Cluster, ConsumerPolicy, ProducerPolicy
from tests import factories
from tests.browser.test_console_e2e import engine_call, login, people  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = """
import json, sys, urllib.error, urllib.request
request = urllib.request.Request(
    sys.argv[1] + "/api/v1/consumers/?ordering=-lag",
    headers={"Authorization": "Bearer " + sys.argv[2]},
)
try:
    with urllib.request.urlopen(request, timeout=20) as response:
        body = json.load(response)
        print(response.status, json.dumps([[c["name"], c["lag"]] for c in body["results"]]))
except urllib.error.HTTPError as exc:
    print(exc.code, exc.read().decode())
"""


def run_script(base: str, token: str) -> tuple[int, str]:
    """The automation: a separate process that knows only the URL and the token."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, base, token], capture_output=True, text=True, timeout=60
    )
    status, _, body = done.stdout.strip().partition(" ")
    return int(status), body


@pytest.fixture
def lagging_consumer(people):  # noqa: F811
    def make() -> None:
        try:
            topic = factories.topic("e2e-lag", Cluster.objects.get(name="main"), people, 2, 1)
            shop = App.objects.get(code="shop")
            ProducerPolicy.objects.create(topic=topic, app=shop)
            ConsumerPolicy.objects.create(topic=topic, app=shop, start_position="earliest")
            publish()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(make).result()
    engine_call(lambda e: e.append("e2e-lag", "shop", [Message(b"m")] * 5, partition=1))


def test_token_from_the_console_drives_the_api_until_revoked(
    page: Page, console_url, lagging_consumer
):
    base = console_url
    page.set_default_timeout(10_000)
    login(page, base, "alice")
    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("lag report")
    page.get_by_label("Expires").select_option("30")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#new-token")).to_contain_text("shown once")
    token = page.locator("#token-value").inner_text().strip()
    assert token.startswith("mqc_")

    status, body = run_script(base, token)
    assert status == 200 and body == '[["shop.e2e-lag", 5]]'

    page.goto(f"{base}/tokens/")
    row = page.locator("#own-tokens tr", has_text="lag report")
    expect(row).not_to_contain_text("never used")
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke token lag report").click()
    expect(page.locator(".flash")).to_contain_text("revoked")
    expect(page.locator("#own-tokens")).not_to_contain_text("lag report")

    status, body = run_script(base, token)
    assert status == 401 and "revoked" in body
