"""The pipeline page (job runs, polled while one runs) and archive searches: the form, its
validation, team scoping, the queued Celery task and the polled result."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from brokers.catalog_loader import publish
from brokers.engine import Message
from brokers.models import ProducerPolicy
from mqcloud.console.pipeline import body_preview
from pipeline.models import JobRun, TraceSearch
from pipeline.status import save_committed
from pipeline.trace_json import json_row
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)


def run(job: str, minutes: int, status: str = "ok", **kw: object) -> JobRun:
    started = T0 + dt.timedelta(minutes=minutes)
    finished = None if status == "running" else started + dt.timedelta(seconds=30)
    return JobRun.objects.create(job=job, started=started, finished=finished, status=status, **kw)


def test_pipeline_page_shows_each_jobs_last_run_and_history(client, world):
    for i in range(25):
        run("rollup", i, rows=100 + i, detail=f"rollup {i} of orders")
    run("archive", 3, "running", rows=5000, lag=42, detail="topics: orders, blue-secret")
    run("trace", 1, "failed", detail="TopicNotFound: topic blue-secret does not exist")
    client.force_login(world.alice)

    page = client.get("/pipeline/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'href="/pipeline/"' in html  # the navigation links it
    archive = html[html.index('id="job-archive"') : html.index('id="job-rollup"')]
    assert "Running" in archive and "5000" in archive and 'class="lag">42<' in archive
    assert "2026-11-20 12:03:00" in archive and "not finished" in archive
    rollup = html[html.index('id="job-rollup"') : html.index('id="job-trace"')]
    assert rollup.count("<tr data-run=") == 20  # the last 20 runs
    assert "2026-11-20 12:24:00" in rollup and "2026-11-20 12:24:30" in rollup
    assert 'class="rows">124<' in rollup and 'class="lag">—<' in rollup
    assert "Failed" in html[html.index('id="job-trace"') :]
    # details name topics (of every team): members do not see them
    assert "blue-secret" not in html and "rollup 24 of orders" not in html
    # a running job: the runs poll themselves
    assert 'hx-get="/pipeline/"' in html and 'data-running="true"' in html

    client.force_login(world.root)
    html = client.get("/pipeline/").content.decode()
    assert "topics: orders, blue-secret" in html and "rollup 24 of orders" in html


def test_pipeline_runs_partial_stops_polling_when_nothing_runs(client, world):
    client.force_login(world.bob)
    never = client.get("/pipeline/").content.decode()
    assert never.count("Never run.") == 3
    running = run("archive", 0, "running")
    partial = client.get("/pipeline/", HTTP_HX_REQUEST="true").content.decode()
    assert partial.startswith('<div id="pipeline-runs"') and "<html" not in partial
    assert 'hx-trigger="every 3s"' in partial
    running.status, running.finished = "ok", timezone.now()
    running.save()
    partial = client.get("/pipeline/", HTTP_HX_REQUEST="true").content.decode()
    assert 'data-running="false"' in partial and "hx-get" not in partial


def test_pipeline_pages_need_login(client, world):
    search = TraceSearch.objects.create(topic="orders", business_id="X")
    for url in ("/pipeline/", "/pipeline/trace/", f"/pipeline/trace/{search.pk}/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_message_browser_leads_to_the_archive_search(client, world):
    client.force_login(world.alice)
    html = client.get(
        "/topics/orders/messages/", {"mode": "business", "business_id": "order-7"}
    ).content.decode()
    form = html[html.index('<form id="archive-search"') :]
    form = form[: form.index("</form>")]
    assert 'action="/pipeline/trace/"' in form
    assert '<input type="hidden" name="topic" value="orders">' in form
    assert '<input type="hidden" name="business_id" value="order-7">' in form

    prefilled = client.get("/pipeline/trace/", {"topic": "orders", "business_id": "order-7"})
    html = prefilled.content.decode()
    assert 'name="topic" value="orders"' in html and 'name="business_id" value="order-7"' in html
    assert 'class="error"' not in html  # a prefilled form is not validated yet


def test_trace_form_validates_inline(client, world):
    client.force_login(world.alice)
    cases = [
        ({"topic": "orders", "business_id": ""}, "This field is required."),
        ({"topic": "blue-secret", "business_id": "X"}, "No such topic."),  # another team's
        ({"topic": "nope", "business_id": "X"}, "No such topic."),
        ({"topic": "orders", "business_id": "X", "since": "yesterday"}, "Use YYYY-MM-DD"),
        ({"topic": "orders", "business_id": "x" * 201}, "at most 200 characters"),
        (
            {
                "topic": "orders",
                "business_id": "X",
                "since": "2026-11-20 12:00:00",
                "until": "2026-11-20 11:00:00",
            },
            "Must be after the start.",
        ),
    ]
    for data, error in cases:
        response = client.post("/pipeline/trace/", data)
        assert response.status_code == 200, data
        assert error in response.content.decode(), data
    assert not TraceSearch.objects.exists()


def test_a_search_is_queued_for_a_worker(client, world, django_capture_on_commit_callbacks):
    queue = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.force_login(world.alice)
    data = {
        "topic": "orders",
        "business_id": "-order-7",  # may look like an option to a command line
        "since": "2026-11-20 12:00:00.250",
        "until": "2026-11-21 00:00:00",
    }
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post("/pipeline/trace/", data)
    search = TraceSearch.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/pipeline/trace/{search.pk}/"
    assert (search.topic, search.business_id, search.requested_by) == (
        "orders",
        "-order-7",
        world.alice,
    )
    assert search.start == dt.datetime(2026, 11, 20, 12, 0, 0, 250000, tzinfo=dt.UTC)
    assert search.end == dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
    assert search.status == TraceSearch.Status.PENDING and len(callbacks) == 1
    queued = [json.loads(m) for m in queue.lrange("celery", 0, -1)]
    assert [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in queued] == [
        ("pipeline.tasks.trace", f"({search.pk},)")
    ]

    # the same terms while it is open: the same search, nothing queued twice
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        again = client.post("/pipeline/trace/", data)
    assert again["Location"] == f"/pipeline/trace/{search.pk}/" and not callbacks
    assert TraceSearch.objects.count() == 1 and queue.llen("celery") == 1
    queue.close()

    # the page shows the search (with the time range) and polls until it is done
    html = client.get(again["Location"]).content.decode()
    assert "-order-7" in html and "from 2026-11-20 12:00:00.250 before 2026-11-21 00:00:00" in html
    partial = client.get(again["Location"], HTTP_HX_REQUEST="true").content.decode()
    assert partial.startswith('<div id="trace-result" data-status="pending"')
    assert f'hx-get="/pipeline/trace/{search.pk}/"' in partial
    assert "Waiting for a worker" in partial

    # the user's recent searches are listed on the form page
    assert f'href="/pipeline/trace/{search.pk}/"' in client.get("/pipeline/trace/").content.decode()


def test_a_user_has_at_most_three_open_searches(client, world):
    client.force_login(world.alice)
    for n in range(3):
        TraceSearch.objects.create(topic="orders", business_id=f"b{n}", requested_by=world.alice)
    response = client.post("/pipeline/trace/", {"topic": "orders", "business_id": "b9"})
    assert response.status_code == 200
    assert "3 archive searches under way" in response.content.decode()
    TraceSearch.objects.filter(business_id="b0").update(status=TraceSearch.Status.OK)
    assert (
        client.post("/pipeline/trace/", {"topic": "orders", "business_id": "b9"}).status_code == 302
    )


def _found(index: int, body: bytes, *, archive: bool, live: bool) -> dict:
    stored = T0 + dt.timedelta(seconds=index)
    return json_row(
        {
            "topic": "orders",
            "partition": 1,
            "index": index,
            "app": "shop",
            "business_id": "order-7",
            "attributes": {"k": "v"},
            "body": body,
            "priority": 0,
            "send_time": stored - dt.timedelta(milliseconds=5),
            "store_time": stored,
            "client_address": "127.0.0.1:5000",
            "in_archive": archive,
            "in_live": live,
        },
        max_body=4,
    )


def test_a_finished_search_shows_its_rows_to_its_topics_team_only(client, world):
    search = TraceSearch.objects.create(
        topic="orders",
        business_id="order-7",
        status=TraceSearch.Status.OK,
        finished=timezone.now(),
        rows=[
            _found(3, b"paid", archive=True, live=False),
            _found(9, b"\x00\xff\x10", archive=True, live=True),
            _found(12, b"shipped", archive=False, live=True),
        ],
    )
    url = f"/pipeline/trace/{search.pk}/"
    client.force_login(world.bob)  # the blue team cannot see orders
    assert client.get(url).status_code == 404
    assert client.get(url, HTTP_HX_REQUEST="true").status_code == 404
    assert client.get("/pipeline/trace/999999/").status_code == 404

    client.force_login(world.alice)
    partial = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-status="ok"' in partial and "hx-get" not in partial
    assert "3 messages" in partial
    rows = partial.split("<tr>")[2:]
    assert "<mark>archive</mark>" in rows[0] and "<mark>live</mark>" not in rows[0]
    assert "2026-11-20 12:00:03.000" in rows[0] and "2026-11-20 12:00:02.995" in rows[0]
    assert '<code class="body">paid</code>' in rows[0] and "k=v" in rows[0]
    assert "<mark>archive</mark> <mark>live</mark>" in rows[1]
    assert '<code class="body">00 ff 10</code> <small>(hex)</small>' in rows[1]
    assert "<mark>archive</mark>" not in rows[2] and "<mark>live</mark>" in rows[2]
    assert '<code class="body">ship</code>' in rows[2] and "(cut)" in rows[2]
    assert '<td class="num">7</td>' in rows[2]  # the full size

    client.force_login(world.root)
    assert client.get(url).status_code == 200


def test_a_failed_search_shows_its_error(client, world):
    search = TraceSearch.objects.create(
        topic="orders",
        business_id="X",
        status=TraceSearch.Status.FAILED,
        error="CommandError: topic orders does not exist",
    )
    client.force_login(world.carol)
    html = client.get(f"/pipeline/trace/{search.pk}/").content.decode()
    assert "The search failed: CommandError: topic orders does not exist" in html
    assert "hx-trigger" not in html


def test_bodies_show_as_text_only_when_printable():
    assert body_preview("héllo\tworld\n".encode()) == ("héllo\tworld\n", True)
    assert body_preview(b"\x00\x01ab") == ("00 01 61 62", False)  # valid UTF-8, not text
    assert body_preview(b"\xff\xfe") == ("ff fe", False)
    cut = "añb".encode()[:2]  # ends inside "ñ"
    assert body_preview(cut, cut=True) == ("a", True)
    assert body_preview(cut) == ("61 c3", False)


def test_pipeline_page_shows_the_archive_per_topic_and_partition(client, world):
    """Archived up to which index, and the real lag: a topic that is on but not read yet
    shows all it stores as lag, never 0; a topic turned off shows where it stopped."""

    async def run(engine):
        for p, n in ((0, 5), (1, 3)):
            await engine.append("orders", "shop", [Message(b"m")] * n, partition=p)
        await engine.append("blue-secret", "blue-app", [Message(b"secret")], partition=0)

    engine_call(run)
    ProducerPolicy.objects.filter(topic__code__in=["orders", "blue-secret"]).update(archive=True)
    publish()
    client.force_login(world.alice)
    html = client.get("/pipeline/").content.decode()
    orders = html[html.index('data-topic="orders"') :]
    orders = orders[: orders.index("</tbody>")]
    assert "not read yet · lag 8" in orders
    assert orders.count('class="num archived">—<') == 2
    assert "blue-secret" not in html  # another team's topic

    save_committed({"orders": {"0": 4, "1": 3}}, settings.REDIS_URL)
    html = client.get("/pipeline/", HTTP_HX_REQUEST="true").content.decode()
    orders = html[html.index('data-topic="orders"') :]
    orders = orders[: orders.index("</tbody>")]
    assert "lag 1" in orders and "not read" not in orders
    assert '<td class="num archived">4</td>' in orders and '<td class="num lag">1</td>' in orders
    assert '<td class="num">0–5</td>' in orders

    ProducerPolicy.objects.filter(topic__code="orders").update(archive=False)
    publish()
    html = client.get("/pipeline/").content.decode()
    orders = html[html.index('data-topic="orders"') :]
    orders = orders[: orders.index("</tbody>")]
    assert ">off<" in orders and '<td class="num archived">4</td>' in orders
    assert '<td class="num lag">—</td>' in orders
