"""Filters of the catalog lists, by the short names the console uses too.

``?topic=``, ``?app=``, ``?team=``, ``?cluster=`` match a code or name exactly and
``?state=running|paused`` a consumer's state; the older ``topic__code``-style names stay
accepted. Every value is checked (the backends in :mod:`mqcloud.api.query` answer 400 for
a bad one) and the schema lists each filter with its type and help.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django_filters import rest_framework as filters

from brokers.models import App, ConsumerPolicy, ProducerPolicy, Topic
from brokers.topic_codes import TOPIC_CODE_MAX
from mqcloud.api.query import StrictFilterSet

NAME_MAX = TOPIC_CODE_MAX  # topic codes (256); names of teams, apps, policies are shorter


def _exact(field: str, help_text: str) -> filters.CharFilter:
    return filters.CharFilter(field_name=field, max_length=NAME_MAX, help_text=help_text)


class TopicFilter(StrictFilterSet):
    team = _exact("team__name", "The owning team's name.")
    cluster = _exact("cluster__name", "The cluster's name.")

    class Meta:
        model = Topic
        fields = ["team", "cluster", "type", "cluster__name", "team__name"]


class AppFilter(StrictFilterSet):
    team = _exact("team__name", "The owning team's name.")

    class Meta:
        model = App
        fields = ["team", "is_admin", "is_anonymous", "team__name"]


class ProducerPolicyFilter(StrictFilterSet):
    topic = _exact("topic__code", "Topic code.")
    app = _exact("app__code", "App code.")
    team = _exact("app__team__name", "The app's team.")

    class Meta:
        model = ProducerPolicy
        fields = ["topic", "app", "team", "http_enabled", "archive", "topic__code", "app__code"]


class ConsumerPolicyFilter(StrictFilterSet):
    topic = _exact("topic__code", "Topic code.")
    app = _exact("app__code", "App code.")
    team = _exact("app__team__name", "The app's team.")
    state = filters.ChoiceFilter(
        choices=[("running", "running"), ("paused", "paused")],
        method="filter_state",
        help_text="running or paused.",
    )

    class Meta:
        model = ConsumerPolicy
        fields = [
            "topic",
            "app",
            "team",
            "state",
            "mode",
            "paused",
            "http_enabled",
            "topic__code",
            "app__code",
        ]

    def filter_state(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(paused=value == "paused")
