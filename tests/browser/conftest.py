"""Playwright fixtures: Debian's Chromium (never a downloaded browser), headless."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

CHROMIUM = os.environ.get("MQCLOUD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One Chromium per test module (Playwright's sync API holds an event loop in this
    thread while it runs, which later async_to_sync callers of other suites must not see)."""
    if not shutil.which(CHROMIUM) and not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/bootstrap.sh (installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    """A fresh browser context and page per test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture(scope="session")
def console_url(django_db_setup, tmp_path_factory) -> Iterator[str]:
    """A live daphne on the session's test database and Redis (DEBUG on, so whitenoise
    serves the vendored static files without collectstatic)."""
    from tests.httpmq.conftest import start_daphne, stop
    from tests.redis_fixtures import require_test_session
    from tests.scripts_path import free_port

    require_test_session()
    port = free_port()
    proc = start_daphne(port, tmp_path_factory.mktemp("web") / "web.log", DEBUG="true")
    yield f"http://127.0.0.1:{port}"
    stop(proc)


@pytest.fixture
def celery_worker(tmp_path) -> Iterator[object]:
    """A real Celery worker on the session's Redis and test database, stopped by PID."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.httpmq.conftest import session_database_url

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DATABASE_URL": session_database_url()}
    with (tmp_path / "worker.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "mqcloud", "worker", "--pool", "solo",
             "--loglevel", "INFO", "--without-mingle", "--without-gossip"],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    yield proc
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="module", autouse=True)
def allow_sync_db() -> Iterator[None]:
    """Playwright's sync API keeps an event loop running in the test thread; the tests'
    own ORM calls (and pytest-django's setup and flushes) are still plain sync code."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous
