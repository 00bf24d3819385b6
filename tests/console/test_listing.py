"""The list helper: every query value validated, the URL keeps the state, and the console
lists search, filter and sort by what it parses."""

from __future__ import annotations

import pytest
from django.db.models import Q
from django.http import QueryDict

from brokers.models import ConsumerPolicy
from mqcloud.console.listing import Filter, ListSpec, parse
from tests import factories

pytestmark = pytest.mark.django_db

SPEC = ListSpec(
    sorts={"code": ["code"], "team": ["team__name"]},
    default_sort="code",
    search=("code",),
    filters=(
        Filter("team", "Team", lookup="team__name"),
        Filter("state", "State", states={"paused": Q(paused=True)}),
        Filter("type", "Type", lookup="type", choices=(("normal", "Normal"),)),
    ),
    prefix="c_",
)


def test_parse_keeps_valid_values_and_drops_the_rest():
    good = parse(QueryDict("c_sort=-team&c_q=%20ab%20&c_team=red&c_state=paused&c_page=3"), SPEC)
    assert (good.sort, good.q, good.page) == ("-team", "ab", "3")
    assert good.filters == {"team": "red", "state": "paused"}
    bad = parse(
        QueryDict("c_sort=--team&c_q=%00&c_state=zombie&c_type=evil&c_team=" + "x" * 500), SPEC
    )
    assert (bad.sort, bad.q) == ("code", "")
    assert bad.filters == {"team": "x" * 200}
    assert parse(QueryDict("sort=team&q=x"), SPEC).sort == "code"  # another list's params
    assert parse(QueryDict("c_page=-3"), SPEC).page == "1"
    assert parse(QueryDict("c_page=0"), SPEC).page == "1"
    assert parse(QueryDict("c_page=²"), SPEC).page == "²"  # the paginator's: the first page
    assert parse(QueryDict("c_team=blue"), SPEC, {"team": [("red", "red")]}).filters == {}


def test_console_lists_filter_search_and_sort(client, world):
    ConsumerPolicy.objects.filter(pk=world.consumer.pk).update(paused=True)
    client.force_login(world.root)
    names = lambda url: [r.consumer.name for r in client.get(url).context["rows"]]  # noqa: E731
    assert names("/consumers/?state=paused") == ["shop.orders"]
    assert names("/consumers/?state=running") == ["blue-app.blue-secret"]
    assert names("/consumers/?team=blue") == ["blue-app.blue-secret"]
    assert names("/consumers/?topic=orders&app=shop") == ["shop.orders"]
    assert names("/consumers/?sort=-name") == ["shop.orders", "blue-app.blue-secret"]
    assert names("/consumers/?q=SECRET") == ["blue-app.blue-secret"]
    topics = client.get("/topics/?sort=-code").context["rows"]
    assert [r.topic.code for r in topics] == ["orders", "blue-secret"]
    page = client.get("/topics/?team=red&sort=-code").content.decode()
    assert 'aria-sort="descending"' in page and 'href="/topics/?team=red&amp;sort=code"' in page
    apps = client.get("/apps/?team=blue").context["listing"].rows
    assert [a.code for a in apps] == ["blue-app"]
    factories.app("zzz", world.red)
    assert client.get("/apps/?sort=-code").context["listing"].rows[0].code == "zzz"


def test_a_member_filters_only_within_their_teams(client, world):
    client.force_login(world.alice)
    response = client.get("/topics/?team=blue")  # not one of her teams: no filter, her topics
    assert [r.topic.code for r in response.context["rows"]] == ["orders"]
    assert response.context["listing"].query.filters == {}
    assert b"blue-secret" not in response.content and b'value="blue"' not in response.content
