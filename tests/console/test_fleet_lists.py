"""Console lists at fleet size (issue 21): with 10,000 topics and 20,000 policies every
list page answers one page — at most 300 kB, a bounded number of queries — and any query
string gives a page, never an error. Timings are measured by bench/console_lists.py, not
asserted here."""

from __future__ import annotations

import time

import pytest

from brokers.models import ConsumerPolicy, Topic
from tests import factories
from tests.fleet import build_fleet, list_pages

pytestmark = pytest.mark.django_db

MAX_BYTES = 300_000
MAX_QUERIES = 25
HOSTILE = [
    "page=abc",
    "page=-1",
    "page=999999",
    "page=1e9999",
    "sort=evil",
    "sort=--code",
    "sort=pk);drop table x;--",
    "team=nosuch",
    "team=%3Cscript%3E",
    "q=%00%27%22%3C",
    "q=" + "x" * 5000,
    "state=zombie",
    "type=nosuch",
    "c_page=abc&p_sort=evil&t_page=0",
]


def test_every_list_page_is_bounded_at_fleet_size(client, django_assert_max_num_queries):
    build_fleet(10_000)
    assert Topic.objects.count() == 10_000 and ConsumerPolicy.objects.count() == 10_000
    client.force_login(factories.user("root", admin=True))
    report = []
    for url in list_pages():
        with django_assert_max_num_queries(MAX_QUERIES):
            started = time.perf_counter()
            response = client.get(url)
            elapsed = time.perf_counter() - started
        assert response.status_code == 200, url
        assert len(response.content) <= MAX_BYTES, (url, len(response.content))
        report.append(f"{url:45} {len(response.content) / 1000:7.1f} kB {elapsed * 1000:6.0f} ms")
    print("\n" + "\n".join(report))  # figures for the record, not assertions
    for url in [
        "/topics/",
        "/consumers/",
        "/apps/fleet/",
        "/alerts/",
        "/audit/",
        "/teams/",
        "/users/",
    ]:
        for query in HOSTILE:
            response = client.get(f"{url}?{query}")
            assert response.status_code == 200, (url, query)
            assert b"Traceback" not in response.content and b"<script>" not in response.content


def test_the_page_shows_only_its_rows(client):
    build_fleet(300, rollup_minutes=1)
    client.force_login(factories.user("root", admin=True))
    topics = client.get("/topics/?page=2")
    assert [r.topic.code for r in topics.context["rows"]][:2] == ["t00050", "t00051"]
    assert len(topics.context["rows"]) == 50
    last = client.get("/topics/?page=999999").context["listing"]
    assert last.page.number == 6 and len(last.rows) == 50
    app = client.get("/apps/fleet/?c_page=2&c_state=paused").context
    assert app["consumers"].total == len(range(0, 300, 7))
    assert all(c.paused for c in app["consumers"].rows)
    assert app["producers"].page.number == 1 and len(app["producers"].rows) == 25


def test_forms_take_a_checked_name_past_the_select_limit(client, settings):
    """A fleet's topics and consumers are no <select> (10,000 options would be 500 kB):
    a text box whose value must name one the user may choose."""
    from mqcloud.console import forms

    build_fleet(30, rollup_minutes=1)
    client.force_login(factories.user("root", admin=True))
    forms.SELECT_LIMIT, before = 10, forms.SELECT_LIMIT
    try:
        page = client.get("/applications/new/?kind=pause").content.decode()
        assert '<select name="consumer"' not in page and 'name="consumer"' in page
        wrong = client.post("/applications/new/", {"kind": "pause", "consumer": "fleet.nosuch"})
        assert "No such name" in wrong.content.decode()
        right = client.post("/applications/new/", {"kind": "pause", "consumer": "fleet.t00003"})
        assert right.status_code == 302
    finally:
        forms.SELECT_LIMIT = before
    page = client.get("/applications/new/?kind=pause").content.decode()
    assert '<select name="consumer"' in page
