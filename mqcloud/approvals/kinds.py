"""What each kind of application carries and what approving it does.

A kind validates its payload with the same serializers as the REST API, as the applicant
(so team scoping applies), names its target (one open application per target), and
executes against the catalog. Validation runs again at execution time, because the
catalog may have changed while the application waited.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

from django.contrib.auth.models import AbstractBaseUser
from django.db import models
from rest_framework import serializers

from brokers import anonymous
from brokers.anonymous import has_anonymous_policy
from brokers.engine import MAX_BUSINESS_ID
from brokers.erasure import erase_group_data, erase_topic_data
from brokers.models import ConsumerPolicy, ProducerPolicy, Team, TeamMembership, Topic
from brokers.topic_codes import TOPIC_CODE_MAX
from mqcloud.alerts.models import MAX_RULES_PER_TOPIC, TrafficRule
from mqcloud.api.fields import StrictCharField, StrictIntegerField
from mqcloud.api.scoping import is_platform_admin, user_teams
from mqcloud.api.serializers import (
    TRAFFIC_RULE_FIELDS,
    ConsumerPolicySerializer,
    ProducerPolicySerializer,
    TopicSerializer,
    TopicUpdateSerializer,
    TrafficRuleSerializer,
)
from mqcloud.approvals.models import Kind
from mqcloud.approvals.secrets import seal, unseal


@dataclass(frozen=True)
class Prepared:
    """A validated application: its target, owning team and an executor."""

    target: str
    team: Team
    payload: dict
    execute: Callable[[], dict]


def _context(user: AbstractBaseUser) -> dict:
    return {"request": SimpleNamespace(user=user)}


def _owned(queryset: models.QuerySet, user: AbstractBaseUser, team_path: str, **lookup: str):
    """The object matching ``lookup`` among those ``user``'s teams own, or a field error."""
    if not is_platform_admin(user):
        queryset = queryset.filter(**{f"{team_path}__in": user_teams(user)})
    found = queryset.filter(**lookup).first()
    if found is None:
        field, value = next(iter(lookup.items()))
        raise serializers.ValidationError({field.split("__")[0]: f"No such object: {value!r}."})
    return found


def _text(payload: dict, field: str) -> str:
    """A non-empty string of the payload (a name or code), or a field error."""
    value = payload.get(field)
    if not isinstance(value, str) or not value:
        raise serializers.ValidationError({field: "This field is required."})
    if "\x00" in value:  # PostgreSQL text cannot hold it: refuse it rather than fail
        raise serializers.ValidationError({field: "Null characters are not allowed."})
    return value


def _unsealed(fields: dict) -> tuple[dict, str | None]:
    try:
        return unseal(fields)
    except ValueError as exc:
        raise serializers.ValidationError({"zbus_token": str(exc)}) from None


def _with_sealed_token(topic: Topic, sealed: str | None) -> Topic:
    """Set the zbus token an application carried sealed (its hash; "" clears it)."""
    if sealed is not None:
        topic.zbus_token_hash = sealed
        topic.save(update_fields=["zbus_token_hash"])
    return topic


def _topic_create(user, payload: dict) -> Prepared:
    data, sealed = _unsealed(payload)  # as stored: the token's hash, not the token
    ser = TopicSerializer(data=data, context=_context(user))
    ser.is_valid(raise_exception=True)
    team = ser.validated_data["team"]
    return Prepared(
        f"topic:{ser.validated_data['code']}",
        team,
        seal(payload),
        lambda: {"topic": _with_sealed_token(ser.save(), sealed).code},
    )


def _topic_update(user, payload: dict) -> Prepared:
    topic = _owned(Topic.objects.all(), user, "team", code=_text(payload, "code"))
    changes = payload.get("changes")
    if not isinstance(changes, dict) or not changes:
        raise serializers.ValidationError({"changes": "Give the fields to change."})
    # The update serializer ignores them; an application asking for them is refused, so it
    # never shows a change that would not happen.
    frozen = sorted(set(changes) & set(TopicUpdateSerializer.frozen_fields))
    if frozen:
        raise serializers.ValidationError(
            {"changes": f"{', '.join(frozen)} cannot change after the topic is created."}
        )
    changes, sealed = _unsealed(changes)  # as stored: the token's hash, not the token
    ser = TopicUpdateSerializer(topic, data=changes, partial=True, context=_context(user))
    ser.is_valid(raise_exception=True)
    return Prepared(
        f"topic:{topic.code}",
        topic.team,
        seal(payload),
        lambda: {"topic": _with_sealed_token(ser.save(), sealed).code},
    )


def _topic_delete(user, payload: dict) -> Prepared:
    topic = _owned(Topic.objects.all(), user, "team", code=_text(payload, "code"))

    def execute() -> dict:
        users = (
            ProducerPolicy.objects.filter(topic=topic).count()
            + ConsumerPolicy.objects.filter(topic=topic).count()
        )
        if users:
            hint = " (close its zbus access first)" if has_anonymous_policy(topic) else ""
            raise serializers.ValidationError(
                {
                    "code": f"{topic.code} still has {users} producers/consumers;"
                    f" delete them first{hint}."
                }
            )
        topic.delete()
        # inside the application's transaction: if the store cannot be cleared, the
        # topic is not deleted either (its data would outlive it, and a topic created
        # later under the same code would find its messages, dead letters and progress)
        return {"deleted": payload["code"], "erased_keys": erase_topic_data(topic)}

    return Prepared(f"topic:{topic.code}", topic.team, payload, execute)


def _zbus_open(user, payload: dict) -> Prepared:
    """Open a topic of the user's team to token-less zbus clients: its team's anonymous app
    gets a producer and a consumer policy on it."""
    topic = _owned(Topic.objects.select_related("team"), user, "team", code=_text(payload, "code"))
    if anonymous.is_open(topic):
        raise serializers.ValidationError(
            {"code": f"{topic.code} is already open to token-less zbus clients."}
        )

    def execute() -> dict:
        anonymous.open_topic(topic)
        return {"topic": topic.code, "zbus_open": True}

    return Prepared(f"topic:{topic.code}", topic.team, {"code": topic.code}, execute)


def _zbus_close(user, payload: dict) -> Prepared:
    """Close a topic to token-less zbus clients: its anonymous producer and consumer go."""
    topic = _owned(Topic.objects.select_related("team"), user, "team", code=_text(payload, "code"))
    if not has_anonymous_policy(topic):
        raise serializers.ValidationError(
            {"code": f"{topic.code} is already closed: zbus clients need an app token."}
        )

    def execute() -> dict:
        anonymous.close_topic(topic)
        return {"topic": topic.code, "zbus_open": False}

    return Prepared(f"topic:{topic.code}", topic.team, {"code": topic.code}, execute)


def _become_admin(user, payload: dict) -> Prepared:
    """The applicant becomes an admin of one of its teams (``{team}``: it manages the
    team's apps, tokens and members' work) or of the platform (``{platform: true}``: it
    decides applications and sees every team). Never approved automatically
    (:data:`~mqcloud.approvals.models.NEVER_AUTO_APPROVED`)."""
    extra = set(payload) - {"team", "platform"}
    if extra:
        raise serializers.ValidationError({sorted(extra)[0]: "Unknown field."})
    platform = payload.get("platform", False)
    if not isinstance(platform, bool):
        raise serializers.ValidationError({"platform": "Must be true or false."})
    if platform == ("team" in payload):
        raise serializers.ValidationError(
            {"team": "Name one of your teams, or set platform to true (not both)."}
        )
    memberships = TeamMembership.objects.filter(user=user).select_related("team")
    if platform:
        if is_platform_admin(user):
            raise serializers.ValidationError({"platform": "You are a platform admin already."})
        first = memberships.order_by("team__name").first()
        if first is None:
            raise serializers.ValidationError({"platform": "Join a team first."})
        team, target, shown = first.team, f"user:{user.pk}:admin:platform", {"platform": True}
    else:
        name = _text(payload, "team")
        membership = memberships.filter(team__name=name).first()
        if membership is None:
            raise serializers.ValidationError({"team": f"You are not a member of {name!r}."})
        if membership.role == TeamMembership.Role.ADMIN:
            raise serializers.ValidationError({"team": f"You are an admin of {name} already."})
        team, target, shown = membership.team, f"user:{user.pk}:admin:{name}", {"team": name}

    def execute() -> dict:
        if platform:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
            return {"user": user.get_username(), "platform_admin": True}
        TeamMembership.objects.filter(user=user, team=team).update(role=TeamMembership.Role.ADMIN)
        return {"user": user.get_username(), "team_admin": team.name}

    return Prepared(target, team, shown, execute)


def _policy_create(serializer_class: type, prefix: str) -> Callable:
    def prepare(user, payload: dict) -> Prepared:
        ser = serializer_class(data=payload, context=_context(user))
        ser.is_valid(raise_exception=True)
        name = ser.validated_data["name"]
        return Prepared(
            f"{prefix}:{name}",
            ser.validated_data["app"].team,
            payload,
            lambda: {prefix: ser.save().name},
        )

    return prepare


def _policy_delete(model: type, prefix: str) -> Callable:
    def prepare(user, payload: dict) -> Prepared:
        policy = _owned(
            model.objects.select_related("app", "topic"),
            user,
            "app__team",
            name=_text(payload, "name"),
        )

        def execute() -> dict:
            policy.delete()
            if model is ConsumerPolicy:  # its progress, retries and dead letters go too
                erased = erase_group_data(policy)
                return {"deleted": payload["name"], "erased_keys": erased}
            return {"deleted": payload["name"]}

        return Prepared(f"{prefix}:{policy.name}", policy.app.team, payload, execute)

    return prepare


def _policy_update(model: type, serializer_class: type, prefix: str, allowed: set[str]):
    """Change only the ``allowed`` fields of a producer or consumer policy: {name, changes}."""

    def prepare(user, payload: dict) -> Prepared:
        policy = _owned(
            model.objects.select_related("app", "topic"),
            user,
            "app__team",
            name=_text(payload, "name"),
        )
        changes = payload.get("changes")
        if not isinstance(changes, dict) or not changes:
            raise serializers.ValidationError({"changes": "Give the fields to change."})
        extra = sorted(set(changes) - allowed)
        if extra:
            raise serializers.ValidationError(
                {"changes": f"Only {', '.join(sorted(allowed))} change here, not {extra}."}
            )
        ser = serializer_class(policy, data=changes, partial=True, context=_context(user))
        ser.is_valid(raise_exception=True)
        return Prepared(
            f"{prefix}:{policy.name}",
            policy.app.team,
            payload,
            lambda: {prefix: ser.save().name, **changes},
        )

    return prepare


def _consumer_change(fields: Callable[[dict], dict]) -> Callable:
    def prepare(user, payload: dict) -> Prepared:
        policy = _owned(
            ConsumerPolicy.objects.select_related("app"),
            user,
            "app__team",
            name=_text(payload, "consumer"),
        )
        changes = fields(payload)
        ser = ConsumerPolicySerializer(policy, data=changes, partial=True, context=_context(user))
        ser.is_valid(raise_exception=True)
        return Prepared(
            f"consumer:{policy.name}",
            policy.app.team,
            payload,
            lambda: {"consumer": ser.save().name, **changes},
        )

    return prepare


def _rate_limit_fields(payload: dict) -> dict:
    if "rate_limit" not in payload:
        raise serializers.ValidationError({"rate_limit": "Give a rate (≥ 1) or null for none."})
    return {"rate_limit": payload["rate_limit"]}


class OffsetResetSerializer(serializers.Serializer):
    """Where to move a consumer's ack index: earliest, latest, a time, or an index."""

    consumer = StrictCharField(max_length=255)
    position = serializers.ChoiceField(choices=["earliest", "latest", "timestamp", "index"])
    timestamp_ms = StrictIntegerField(required=False, min_value=0, max_value=2**53)
    index = StrictIntegerField(required=False, min_value=0, max_value=2**62)
    partition = StrictIntegerField(required=False, min_value=0, max_value=1023)
    client_id = StrictCharField(required=False, max_length=128)

    def validate(self, attrs: dict) -> dict:
        if attrs["position"] == "timestamp" and "timestamp_ms" not in attrs:
            raise serializers.ValidationError({"timestamp_ms": "Give the time to reset to."})
        if attrs["position"] == "index" and ("index" not in attrs or "partition" not in attrs):
            raise serializers.ValidationError(
                {"index": "An index reset names a partition and an index."}
            )
        return attrs


def _reset(user, payload: dict, *, skip: bool = False) -> Prepared:
    from mqcloud.operations import start_offset_reset

    if skip:
        payload = {"consumer": payload.get("consumer"), "position": "timestamp", "timestamp_ms": 0}
    ser = OffsetResetSerializer(data=payload)
    ser.is_valid(raise_exception=True)
    data = dict(ser.validated_data)
    policy = _owned(
        ConsumerPolicy.objects.select_related("app", "topic"),
        user,
        "app__team",
        name=data["consumer"],
    )
    if data.get("partition") is not None and data["partition"] >= policy.topic.partitions:
        raise serializers.ValidationError({"partition": "The topic has no such partition."})
    return Prepared(
        f"consumer:{policy.name}",
        policy.app.team,
        payload,
        lambda: start_offset_reset(policy.topic.code, policy.app.code, data, skip_backlog=skip),
    )


class DeadLetterResendSerializer(serializers.Serializer):
    """Which dead letters of a consumer go back to its retry store (none listed: all)."""

    consumer = StrictCharField(max_length=255)
    ids = serializers.ListField(
        child=StrictIntegerField(min_value=0), required=False, max_length=10_000
    )


def _dlq_resend(user, payload: dict) -> Prepared:
    from mqcloud.operations import resend_dead_letters

    ser = DeadLetterResendSerializer(data=payload)
    ser.is_valid(raise_exception=True)
    policy = _owned(
        ConsumerPolicy.objects.select_related("app", "topic"),
        user,
        "app__team",
        name=ser.validated_data["consumer"],
    )
    ids = list(ser.validated_data.get("ids", []))
    return Prepared(
        f"consumer:{policy.name}",
        policy.app.team,
        payload,
        lambda: {"resent": resend_dead_letters(policy.topic.code, policy.app.code, ids)},
    )


class RetrySkipSerializer(serializers.Serializer):
    """A consumer's retries that came into its store before ``before_ms`` are deleted, as
    consumed: only those of messages with ``business_id`` when given; a broadcast
    consumer's ``client_id``'s own when given, else the group's and every client's."""

    consumer = StrictCharField(max_length=255)
    before_ms = StrictIntegerField(min_value=0, max_value=2**53)
    business_id = StrictCharField(
        required=False, max_length=MAX_BUSINESS_ID, allow_blank=False, trim_whitespace=False
    )
    client_id = StrictCharField(required=False, max_length=128)


def _consumer_and_client(user, data: dict, why: str) -> tuple[ConsumerPolicy, str | None]:
    """The team's consumer ``data`` names, and its ``client_id`` — refused (``why``) for
    a consumer whose clients share one progress."""
    policy = _owned(
        ConsumerPolicy.objects.select_related("app", "topic"),
        user,
        "app__team",
        name=data["consumer"],
    )
    client_id = data.get("client_id")
    if client_id is not None and not policy.per_client:
        raise serializers.ValidationError({"client_id": f"This consumer consumes by {why}"})
    return policy, client_id


def _retry_skip(user, payload: dict) -> Prepared:
    from mqcloud.operations import skip_retries_before

    ser = RetrySkipSerializer(data=payload)
    ser.is_valid(raise_exception=True)
    data = ser.validated_data
    policy, client_id = _consumer_and_client(user, data, "clustering: its retries are the group's.")
    business_id = data.get("business_id")
    return Prepared(
        f"consumer:{policy.name}",
        policy.app.team,
        dict(data),
        lambda: {
            "skipped": skip_retries_before(
                policy.topic.code, policy.app.code, data["before_ms"], business_id, client_id
            )
        },
    )


class TimeSpanSerializer(serializers.Serializer):
    """``[from_ms, to_ms)``, epoch milliseconds, not empty."""

    from_ms = StrictIntegerField(min_value=0, max_value=2**53)
    to_ms = StrictIntegerField(min_value=0, max_value=2**53)

    def validate(self, attrs: dict) -> dict:
        if attrs["to_ms"] <= attrs["from_ms"]:
            raise serializers.ValidationError({"to_ms": "The span must end after it starts."})
        return attrs


class ReconsumeSerializer(TimeSpanSerializer):
    """A time span whose messages a consumer gets again (copied into its retry store); a
    broadcast consumer's one client (a fan-out queue's one member), or without
    ``client_id`` every client (member)."""

    consumer = StrictCharField(max_length=255)
    client_id = StrictCharField(required=False, max_length=128)


def _reconsume(user, payload: dict) -> Prepared:
    from mqcloud.operations import start_reconsume

    ser = ReconsumeSerializer(data=payload)
    ser.is_valid(raise_exception=True)
    data = ser.validated_data
    policy, client_id = _consumer_and_client(
        user, data, "clustering: its clients share one progress."
    )
    return Prepared(
        f"consumer:{policy.name}",
        policy.app.team,
        payload,
        lambda: start_reconsume(
            policy.topic.code, policy.app.code, data["from_ms"], data["to_ms"], client_id
        ),
    )


class TimerCancelSerializer(serializers.Serializer):
    """Which delayed or timer messages of a topic are cancelled before they are due (by
    delay id: what the console's timer list shows; an HTTP-MQ msgId names it too)."""

    topic = StrictCharField(max_length=TOPIC_CODE_MAX)
    ids = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=2**63 - 1),
        min_length=1,
        max_length=10_000,
    )


def _timer_cancel(user, payload: dict) -> Prepared:
    from mqcloud.operations import cancel_delayed

    ser = TimerCancelSerializer(data=payload)
    ser.is_valid(raise_exception=True)
    topic = _owned(
        Topic.objects.select_related("team"), user, "team", code=ser.validated_data["topic"]
    )
    ids = sorted(set(ser.validated_data["ids"]))

    def execute() -> dict:
        cancelled = cancel_delayed(topic.code, ids)
        done = set(cancelled)
        # The others were delivered already (or cancelled by someone else): say which.
        return {"cancelled": len(cancelled), "not_held": [i for i in ids if i not in done]}

    return Prepared(f"topic:{topic.code}", topic.team, {"topic": topic.code, "ids": ids}, execute)


def _traffic_rule_add(user, payload: dict) -> Prepared:
    """A rule for one of the team's topics: ``{code, operand, operator, threshold,
    every_minutes, active_from, active_to, time_zone}``."""
    topic = _owned(Topic.objects.select_related("team"), user, "team", code=_text(payload, "code"))
    rule = {k: v for k, v in payload.items() if k != "code"}
    unknown = sorted(set(rule) - set(TRAFFIC_RULE_FIELDS))
    if unknown:
        raise serializers.ValidationError({"payload": f"Unknown fields: {', '.join(unknown)}."})
    ser = TrafficRuleSerializer(data=rule)
    ser.is_valid(raise_exception=True)

    def execute() -> dict:
        if TrafficRule.objects.filter(topic=topic).count() >= MAX_RULES_PER_TOPIC:
            raise serializers.ValidationError(
                {"code": f"{topic.code} has {MAX_RULES_PER_TOPIC} rules, the most a topic has."}
            )
        return {"rule": ser.save(topic=topic).pk, "topic": topic.code}

    return Prepared(f"topic:{topic.code}:rules", topic.team, {"code": topic.code, **rule}, execute)


def _traffic_rule_delete(user, payload: dict) -> Prepared:
    """``{code, rule}``: one of the topic's rules goes."""
    topic = _owned(Topic.objects.select_related("team"), user, "team", code=_text(payload, "code"))
    rule_id = payload.get("rule")
    if isinstance(rule_id, bool) or not isinstance(rule_id, int):
        raise serializers.ValidationError({"rule": "Give the rule's id (a number)."})
    if not TrafficRule.objects.filter(topic=topic, pk=rule_id).exists():
        raise serializers.ValidationError({"rule": f"{topic.code} has no rule {rule_id}."})

    def execute() -> dict:
        deleted, _ = TrafficRule.objects.filter(topic=topic, pk=rule_id).delete()
        return {"deleted": bool(deleted), "topic": topic.code}

    return Prepared(
        f"topic:{topic.code}:rules", topic.team, {"code": topic.code, "rule": rule_id}, execute
    )


class MessageExportSerializer(TimeSpanSerializer):
    """A time span of one of the team's topics whose messages are exported to a file."""

    topic = StrictCharField(max_length=TOPIC_CODE_MAX)


def _message_export(user, payload: dict) -> Prepared:
    from mqcloud.exports import start_export

    ser = MessageExportSerializer(data=payload)
    ser.is_valid(raise_exception=True)
    data = ser.validated_data
    topic = _owned(Topic.objects.select_related("team"), user, "team", code=data["topic"])
    return Prepared(
        f"topic:{topic.code}:export",
        topic.team,
        {"topic": topic.code, "from_ms": data["from_ms"], "to_ms": data["to_ms"]},
        lambda: start_export(topic.code, data["from_ms"], data["to_ms"]),
    )


PREPARERS: dict[str, Callable[[AbstractBaseUser, dict], Prepared]] = {
    Kind.TOPIC_CREATE: _topic_create,
    Kind.TOPIC_UPDATE: _topic_update,
    Kind.TOPIC_DELETE: _topic_delete,
    Kind.PRODUCER_CREATE: _policy_create(ProducerPolicySerializer, "producer"),
    Kind.PRODUCER_DELETE: _policy_delete(ProducerPolicy, "producer"),
    Kind.PRODUCER_UPDATE: _policy_update(
        ProducerPolicy,
        ProducerPolicySerializer,
        "producer",
        {"blacklist", "weights", "rate_limit"},
    ),
    Kind.CONSUMER_CREATE: _policy_create(ConsumerPolicySerializer, "consumer"),
    Kind.CONSUMER_DELETE: _policy_delete(ConsumerPolicy, "consumer"),
    Kind.CONSUMER_UPDATE: _policy_update(
        ConsumerPolicy,
        ConsumerPolicySerializer,
        "consumer",
        {
            "blacklist",
            "backlog_alert_enabled",
            "backlog_alert_count",
            "backlog_alert_age_s",
            "failure_alert_per_hour",
        },
    ),
    Kind.PAUSE: _consumer_change(lambda p: {"paused": True}),
    Kind.RESUME: _consumer_change(lambda p: {"paused": False}),
    Kind.RATE_LIMIT: _consumer_change(_rate_limit_fields),
    Kind.OFFSET_RESET: _reset,
    Kind.SKIP_BACKLOG: lambda user, payload: _reset(user, payload, skip=True),
    Kind.DLQ_RESEND: _dlq_resend,
    Kind.RECONSUME: _reconsume,
    Kind.TIMER_CANCEL: _timer_cancel,
    Kind.ZBUS_OPEN: _zbus_open,
    Kind.ZBUS_CLOSE: _zbus_close,
    Kind.TRAFFIC_RULE_ADD: _traffic_rule_add,
    Kind.TRAFFIC_RULE_DELETE: _traffic_rule_delete,
    Kind.MESSAGE_EXPORT: _message_export,
    Kind.RETRY_SKIP: _retry_skip,
    Kind.BECOME_ADMIN: _become_admin,
}


# What each kind's payload holds, with an example: the REST API's schema documents these.
PAYLOADS: dict[str, tuple[str, dict]] = {
    Kind.TOPIC_CREATE: (
        "a topic, as POST /topics/ takes it",
        {"code": "orders", "cluster": "c1", "team": "red", "partitions": 4},
    ),
    Kind.TOPIC_UPDATE: (
        "{code, changes}: changes are topic fields (description, retention, send_limit,"
        " send_back_limit, queue settings, surge_alert_receiver, silence_alert_minutes)",
        {"code": "orders", "changes": {"retention_max_age_s": 86400}},
    ),
    Kind.TOPIC_DELETE: ("{code}; its producers and consumers go first", {"code": "orders"}),
    Kind.PRODUCER_CREATE: (
        "a producer policy, as POST /producer-policies/ takes it",
        {"topic": "orders", "app": "shop"},
    ),
    Kind.PRODUCER_UPDATE: (
        "{name, changes}: changes holds blacklist (IPs/networks), weights"
        " ({broker id: 0–10000}) and/or rate_limit (messages per second, null: none)",
        {"name": "shop.orders", "changes": {"blacklist": ["10.0.0.0/8"], "weights": {"1": 100}}},
    ),
    Kind.PRODUCER_DELETE: ("{name}", {"name": "shop.orders"}),
    Kind.CONSUMER_CREATE: (
        "a consumer policy, as POST /consumer-policies/ takes it",
        {"topic": "orders", "app": "shop", "start_position": "earliest"},
    ),
    Kind.CONSUMER_UPDATE: (
        "{name, changes}: changes holds blacklist and/or the alert rules"
        " (backlog_alert_enabled, the consumer's alert switch; backlog_alert_count,"
        " backlog_alert_age_s; failure_alert_per_hour, null for the platform's default,"
        " 0 for never)",
        {
            "name": "shop.orders",
            "changes": {"backlog_alert_enabled": True, "backlog_alert_count": 5000},
        },
    ),
    Kind.CONSUMER_DELETE: ("{name}", {"name": "shop.orders"}),
    Kind.PAUSE: ("{consumer}", {"consumer": "shop.orders"}),
    Kind.RESUME: ("{consumer}", {"consumer": "shop.orders"}),
    Kind.RATE_LIMIT: (
        "{consumer, rate_limit}: messages per second, null for none",
        {"consumer": "shop.orders", "rate_limit": 100},
    ),
    Kind.OFFSET_RESET: (
        "{consumer, position: earliest|latest|timestamp|index, timestamp_ms, index, partition,"
        " client_id}; runs on a worker, see /applications/{id}/progress/",
        {"consumer": "shop.orders", "position": "timestamp", "timestamp_ms": 1735689600000},
    ),
    Kind.SKIP_BACKLOG: (
        "{consumer}: reset to what was stored in the last 60 s; runs on a worker",
        {"consumer": "shop.orders"},
    ),
    Kind.DLQ_RESEND: (
        "{consumer, ids}: dead letters back to the retry store (no ids: all)",
        {"consumer": "shop.orders", "ids": [3, 4]},
    ),
    Kind.RECONSUME: (
        "{consumer, from_ms, to_ms, client_id}: what was stored in [from_ms, to_ms) is"
        " delivered to the consumer again — a broadcast consumer's client_id, or without"
        " one each of its clients (copied into its retry store, due at once; its offsets"
        " do not move), over whatever protocol its clients speak — at most 100,000"
        " messages in all, or the application fails with nothing copied; runs on a worker",
        {"consumer": "shop.orders", "from_ms": 1735689600000, "to_ms": 1735693200000},
    ),
    Kind.TIMER_CANCEL: (
        "{topic, ids}: delayed or timer messages (delay ids, as GET"
        " /topics/{code}/delayed/ lists them) that are never delivered; the result says"
        " which were delivered already",
        {"topic": "orders", "ids": [17, 18]},
    ),
    Kind.ZBUS_OPEN: (
        "{code}: token-less zbus clients (and anonymous VibeMQ clients where the operator"
        " allows them) may produce to and consume the topic, as its team's anonymous app"
        " (an anonymous producer and consumer group appear on the topic); the topic's zbus"
        " access token, if set, still applies",
        {"code": "orders"},
    ),
    Kind.ZBUS_CLOSE: (
        "{code}: the topic's anonymous producer and consumer go; zbus clients then need an"
        " app token with a policy on the topic",
        {"code": "orders"},
    ),
    Kind.TRAFFIC_RULE_ADD: (
        "{code, operand: count_5m|count_1h|count_1d|ratio_5m|ratio_1h|ratio_1d, operator:"
        " gt|gte|lt|lte, threshold (messages; percent change for ratio_*), every_minutes"
        " (1-1440, default 5), active_from, active_to (HH:MM, both or neither), time_zone"
        " (of that window, an IANA name, default UTC)}: the topic's traffic-alert receiver"
        " is alerted when it matches (at most 20 per topic)",
        {
            "code": "orders",
            "operand": "count_5m",
            "operator": "lt",
            "threshold": 1,
            "active_from": "09:00",
            "active_to": "18:00",
            "time_zone": "Asia/Shanghai",
        },
    ),
    Kind.TRAFFIC_RULE_DELETE: ("{code, rule}: the rule's id", {"code": "orders", "rule": 3}),
    Kind.MESSAGE_EXPORT: (
        "{topic, from_ms, to_ms}: the messages stored in [from_ms, to_ms) are written to a"
        " gzipped JSON Lines file on a worker (at most MESSAGE_EXPORT_MAX, 1,000,000 by"
        " default, or the application fails with nothing written); see"
        " /applications/{id}/progress/, then download it from /applications/{id}/export/",
        {"topic": "orders", "from_ms": 1735689600000, "to_ms": 1735693200000},
    ),
    Kind.RETRY_SKIP: (
        "{consumer, before_ms, business_id, client_id}: the consumer's retries that came"
        " into its retry store before before_ms are deleted, as consumed — only those of"
        " messages with business_id (the key) when given; a broadcast consumer's client_id's"
        " own retries when given, else the group's and every client's (a fan-out queue's"
        " members')",
        {"consumer": "shop.orders", "before_ms": 1735689600000, "business_id": "order-17"},
    ),
    Kind.BECOME_ADMIN: (
        "{team} or {platform: true}: the applicant becomes an admin of one of its teams (it"
        " changes the team's apps and tokens) or a platform admin (it decides applications"
        " and sees every team); always decided by a platform admin, never automatically",
        {"team": "red"},
    ),
}


def prepare(kind: str, user: AbstractBaseUser, payload: object) -> Prepared:
    """Validate ``payload`` for ``kind`` as ``user``; raises a DRF ValidationError."""
    if kind not in PREPARERS:
        raise serializers.ValidationError({"kind": f"Unknown kind; use one of {Kind.values}."})
    if not isinstance(payload, dict):
        raise serializers.ValidationError({"payload": "Must be a JSON object."})
    return PREPARERS[kind](user, payload)
