"""Token-less clients: each team's anonymous app, and opening a topic to it.

A client that shows no app token (a 2015 zbus client, anonymous VibeMQ where the operator
allows it) acts as the anonymous app of the topic's team. That app is an app like any
other to the engine: it may produce or consume only where it has policies. So a topic is
*open* to token-less clients exactly when the anonymous app of its team has a producer and
a consumer policy on it — the topic's anonymous producer and anonymous consumer group,
which the console lists, pauses and limits like any other. Opening and closing a topic
made in the console is an application (``zbus_open`` / ``zbus_close``); an MQ made by
zbus ``create_mq`` is opened when it is created, as zbus 5 MQs were open.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q, QuerySet

from brokers.models import App, ConsumerPolicy, ProducerPolicy, Team, Topic, fit_policy_name
from brokers.validators import APP_CODE_MAX

PREFIX = "anonymous"
"""App codes and policy names ``anonymous`` and ``anonymous.*`` are reserved for these."""


def is_reserved(name: str) -> bool:
    """Whether ``name`` is reserved for anonymous apps and policies."""
    return name == PREFIX or name.startswith(PREFIX + ".")


def anonymous_app(team: Team) -> App:
    """The anonymous app of ``team``, created on first use."""
    app = App.objects.filter(team=team, is_anonymous=True).first()
    if app is not None:
        return app
    base = f"{PREFIX}.{team.name}"[:APP_CODE_MAX]
    code, n = base, 1
    while App.objects.filter(code=code).exists():
        n += 1
        suffix = f"-{n}"
        code = base[: APP_CODE_MAX - len(suffix)] + suffix
    try:
        with transaction.atomic():
            return App.objects.create(
                code=code,
                team=team,
                is_anonymous=True,
                description="What token-less clients act as on this team's open topics.",
            )
    except IntegrityError:  # created concurrently
        return App.objects.get(team=team, is_anonymous=True)


def policy_name(topic: Topic) -> str:
    """The name of the topic's anonymous producer and consumer: ``anonymous.<topic>``, cut
    short and marked with a digest of the code when longer than a policy name may be."""
    return fit_policy_name(f"{PREFIX}.{topic.code}", topic.code)


def _anonymous_policies(model: type[ProducerPolicy] | type[ConsumerPolicy]) -> QuerySet:
    """Policies of the outer topic's team's anonymous app on the outer topic."""
    return model.objects.filter(
        topic=OuterRef("pk"), app__is_anonymous=True, app__team=OuterRef("team")
    )


def with_open_flag(topics: QuerySet[Topic]) -> QuerySet[Topic]:
    """``topics`` annotated with a boolean ``zbus_open`` (:func:`is_open`, computed by the
    database in the same query: lists of thousands of topics pay nothing per row)."""
    both = Q(Exists(_anonymous_policies(ProducerPolicy))) & Q(
        Exists(_anonymous_policies(ConsumerPolicy))
    )
    return topics.annotate(zbus_open=ExpressionWrapper(both, output_field=BooleanField()))


def is_open(topic: Topic) -> bool:
    """Whether token-less clients may produce to and consume ``topic``."""
    return bool(
        with_open_flag(Topic.objects.filter(pk=topic.pk))
        .values_list("zbus_open", flat=True)
        .first()
    )


def has_anonymous_policy(topic: Topic) -> bool:
    """Whether any anonymous producer or consumer is left on ``topic`` (what closing
    removes; a half-open topic has one of the two)."""
    anonymous = {"topic": topic, "app__is_anonymous": True}
    return (
        ProducerPolicy.objects.filter(**anonymous).exists()
        or ConsumerPolicy.objects.filter(**anonymous).exists()
    )


def open_topic(topic: Topic) -> None:
    """Give the topic's team's anonymous app a producer and a consumer policy on it (a
    consumer group that starts at the earliest message, as a zbus queue does)."""
    with transaction.atomic():
        app = anonymous_app(topic.team)
        name = policy_name(topic)
        ProducerPolicy.objects.get_or_create(topic=topic, app=app, defaults={"name": name})
        ConsumerPolicy.objects.get_or_create(
            topic=topic,
            app=app,
            defaults={
                "name": name,
                "start_position": "earliest",
                "mode": (
                    ConsumerPolicy.Mode.BROADCAST
                    if topic.type == Topic.Type.BROADCAST
                    else ConsumerPolicy.Mode.CLUSTERING
                ),
            },
        )


def close_topic(topic: Topic) -> None:
    """Remove the anonymous producer and consumer of ``topic``: token-less clients are
    refused from the next catalog version on."""
    with transaction.atomic():
        filters = {"topic": topic, "app__is_anonymous": True}
        for policy in ProducerPolicy.objects.filter(**filters):
            policy.delete()
        for policy in ConsumerPolicy.objects.filter(**filters):
            policy.delete()
