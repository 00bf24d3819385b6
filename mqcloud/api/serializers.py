"""Serializers of the catalog API; model validation (``full_clean``) runs on every write.

Request bodies take only the JSON types the schema declares (``mqcloud.api.fields``).
What cannot change after creation (a broker's id, an app's code, a topic's code, cluster
and partitions, a policy's topic and app) is read-only in the update serializers
(``…UpdateSerializer``), so the schema marks it ``readOnly`` on PUT and PATCH and a value
sent there is ignored, as DRF ignores every read-only field.
"""

from __future__ import annotations

import functools
import zoneinfo

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from brokers import anonymous
from brokers.models import (
    App,
    Broker,
    Cluster,
    ConsumerPolicy,
    PartitionGroup,
    ProducerPolicy,
    Team,
    Topic,
)
from brokers.topology import create_partition_groups
from brokers.validators import validate_broker_weights, validate_ip_list
from mqcloud.alerts.models import TrafficRule, measures_change
from mqcloud.api.fields import (
    StrictCharField,
    StrictIntegerField,
    StrictModelSerializer,
    StrictSlugRelatedField,
)
from mqcloud.api.scoping import is_platform_admin, user_teams
from mqcloud.console.lag import RATE_MINUTES
from mqcloud.zbus_access import OPEN_HELP

MAX_BLACKLIST = 1000  # entries (brokers.validators.validate_ip_list)
MAX_NETWORK_TEXT = 64  # characters of one address or network, IPv6 with a prefix included
MAX_WEIGHT = 10_000  # brokers.validators.validate_broker_weights

RESERVED_HELP = (
    f"'{anonymous.PREFIX}' and '{anonymous.PREFIX}.…' are reserved for the teams' anonymous"
    " apps and their policies (what token-less clients act as)."
)


class ModelCleanMixin:
    """Run the model's own validation (fields, ``clean()``, unique checks) before saving."""

    def validate(self, attrs: dict) -> dict:
        attrs = super().validate(attrs)  # type: ignore[misc]
        model = self.Meta.model  # type: ignore[attr-defined]
        instance = self.instance or model()  # type: ignore[attr-defined]
        model_fields = {f.name for f in model._meta.get_fields() if hasattr(f, "attname")}
        for key, value in attrs.items():
            if key in model_fields:
                setattr(instance, key, value)
        try:
            instance.full_clean(exclude=self.clean_exclude())
        except DjangoValidationError as exc:
            raise serializers.ValidationError(serializers.as_serializer_error(exc)) from None
        return attrs

    def clean_exclude(self) -> list[str]:
        return []


class FrozenAfterCreate(serializers.Serializer):
    """An update serializer: ``frozen_fields`` are read-only (sent values are ignored, the
    schema marks them ``readOnly``); write-only ones (creation options) are left out."""

    frozen_fields: tuple[str, ...] = ()

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        for name in self.frozen_fields:
            field = fields[name]
            if field.write_only:
                del fields[name]
                continue
            field.read_only = True
            field.required = False
        return fields


class TeamField(StrictSlugRelatedField):
    """A team named by its slug, limited to the caller's teams."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(slug_field="name", **kwargs)

    def get_queryset(self):
        request = self.context.get("request")
        return user_teams(request.user) if request else Team.objects.none()


class TeamSerializer(serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["id", "name", "description", "created_at"]


class ClusterSerializer(ModelCleanMixin, StrictModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "description", "created_at"]


class BrokerSerializer(ModelCleanMixin, StrictModelSerializer):
    id = StrictIntegerField(min_value=1, max_value=2_147_483_647)
    cluster = StrictSlugRelatedField(slug_field="name", queryset=Cluster.objects.all())

    class Meta:
        model = Broker
        fields = [
            "id",
            "cluster",
            "host",
            "jmq4_port",
            "zbus_port",
            "vibemq_port",
            "data_center",
            "weight",
            "readable",
            "writable",
            "status",
            "last_heartbeat",
        ]
        read_only_fields = ["status", "last_heartbeat"]


class PartitionGroupSerializer(serializers.ModelSerializer):
    class Meta:
        model = PartitionGroup
        fields = ["group_id", "leader", "partitions"]
        read_only_fields = fields


class TopicSerializer(ModelCleanMixin, StrictModelSerializer):
    cluster = StrictSlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    team = TeamField()
    groups = PartitionGroupSerializer(many=True, read_only=True)
    partition_groups = StrictIntegerField(
        write_only=True,
        required=False,
        min_value=1,
        max_value=1024,
        help_text="Number of partition groups to create (default: one per writable broker,"
        " at most one per partition). Only on creation.",
    )
    zbus_token = StrictCharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="zbus MQ access token (stored hashed; empty clears it).",
    )
    zbus_token_set = serializers.SerializerMethodField()
    zbus_open = serializers.SerializerMethodField(help_text=OPEN_HELP)
    produce_rate_per_s = serializers.SerializerMethodField(
        help_text=f"Messages per second produced over the last {RATE_MINUTES} whole minutes"
        " (lists and single topics; null when the message store did not answer)."
    )

    class Meta:
        model = Topic
        fields = [
            "id",
            "code",
            "cluster",
            "team",
            "type",
            "partitions",
            "partition_groups",
            "groups",
            "retention_max_age_s",
            "retention_max_count",
            "send_limit",
            "send_back_limit",
            "delivery_mode",
            "max_queue_size",
            "overflow_policy",
            "message_ttl_ms",
            "dead_letter_enabled",
            "dead_letter_queue",
            "max_retry_attempts",
            "zbus_mode",
            "zbus_name",
            "zbus_token",
            "zbus_token_set",
            "zbus_open",
            "produce_rate_per_s",
            "surge_alert_receiver",
            "silence_alert_minutes",
            "creator",
            "description",
            "created_at",
        ]
        read_only_fields = ["creator", "created_at"]

    @extend_schema_field(serializers.BooleanField)
    def get_zbus_token_set(self, obj: Topic) -> bool:
        return bool(obj.zbus_token_hash)

    @extend_schema_field(serializers.BooleanField(help_text=OPEN_HELP))
    def get_zbus_open(self, obj: Topic) -> bool:
        """From the viewset's ``zbus_open`` annotation; one query for a lone topic."""
        annotated = getattr(obj, "zbus_open", None)
        return bool(annotated) if annotated is not None else anonymous.is_open(obj)

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_produce_rate_per_s(self, obj: Topic) -> float | None:
        """From the view's batched rates (``context['rates']``), else null."""
        rate = self.context.get("rates", {}).get(obj.code)
        return round(rate, 3) if rate is not None else None

    def validate(self, attrs: dict) -> dict:
        attrs = super().validate({k: v for k, v in attrs.items() if k != "zbus_token"}) | {
            k: v for k, v in attrs.items() if k == "zbus_token"
        }
        if self.instance is None:
            groups = attrs.get("partition_groups")
            if groups is not None and groups > attrs.get("partitions", 4):
                raise serializers.ValidationError(
                    {"partition_groups": "Cannot exceed the number of partitions."}
                )
        return attrs

    @transaction.atomic
    def create(self, validated_data: dict) -> Topic:
        groups = validated_data.pop("partition_groups", None)
        token = validated_data.pop("zbus_token", "")
        request = self.context.get("request")
        topic = Topic(**validated_data, creator=getattr(request.user, "username", ""))
        topic.set_zbus_token(token)
        topic.save()
        try:
            create_partition_groups(topic, groups)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(serializers.as_serializer_error(exc)) from None
        return topic

    def update(self, instance: Topic, validated_data: dict) -> Topic:
        if "zbus_token" in validated_data:
            instance.set_zbus_token(validated_data.pop("zbus_token"))
        return super().update(instance, validated_data)


class AppSerializer(ModelCleanMixin, StrictModelSerializer):
    team = TeamField()
    token = serializers.SerializerMethodField(
        help_text="The app token, present only in the response that issued it."
    )
    token_hints = serializers.SerializerMethodField()

    class Meta:
        model = App
        fields = [
            "id",
            "code",
            "team",
            "description",
            "is_admin",
            "is_anonymous",
            "token",
            "token_hints",
            "created_at",
        ]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_token(self, obj: App) -> str | None:
        return getattr(obj, "_issued_token", None)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_token_hints(self, obj: App) -> list[str]:
        return [f"…{t.hint}" for t in obj.tokens.all() if t.revoked_at is None]

    def validate_is_admin(self, value: bool) -> bool:
        request = self.context.get("request")
        if value and not (request and is_platform_admin(request.user)):
            raise serializers.ValidationError("Only platform admins may create admin apps.")
        if value and self.instance is not None and self.instance.is_anonymous:
            raise serializers.ValidationError(
                "An anonymous app cannot be an admin app: token-less clients act as it."
            )
        return value

    def validate_code(self, value: str) -> str:
        if self.instance is None and anonymous.is_reserved(value):
            raise serializers.ValidationError(RESERVED_HELP)
        return value

    @transaction.atomic
    def create(self, validated_data: dict) -> App:
        app = super().create(validated_data)
        app._issued_token = app.issue_token()
        return app


class PolicySerializerBase(ModelCleanMixin, StrictModelSerializer):
    """Shared fields of producer and consumer policies: topic and app by code."""

    topic = StrictSlugRelatedField(slug_field="code", queryset=Topic.objects.all())
    app = StrictSlugRelatedField(slug_field="code", queryset=App.objects.none())
    name = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=255,
        help_text="Unique name; defaults to <app>.<topic> (cut short and marked with a digest"
        " when that is too long or taken).",
    )
    blacklist = serializers.ListField(
        child=StrictCharField(max_length=MAX_NETWORK_TEXT),
        max_length=MAX_BLACKLIST,
        required=False,
        validators=[validate_ip_list],
        help_text="IP addresses or networks (CIDR) refused by the broker; an empty list"
        " refuses none. Never null.",
    )

    def get_fields(self) -> dict:
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None:
            fields["app"].queryset = App.objects.filter(team__in=user_teams(request.user))
        return fields

    def validate(self, attrs: dict) -> dict:
        if not attrs.get("name") and self.instance is None and "app" in attrs and "topic" in attrs:
            attrs["name"] = self.Meta.model.default_name(attrs["app"], attrs["topic"])
        self._refuse_anonymous(attrs)
        return super().validate(attrs)

    def _refuse_anonymous(self, attrs: dict) -> None:
        """Anonymous policies come from opening a topic (application ``zbus_open``), never
        from here: no anonymous app in a new policy, no reserved name for any."""
        app = attrs.get("app")
        if self.instance is None and app is not None and app.is_anonymous:
            raise serializers.ValidationError(
                {
                    "app": f"{app.code} is an anonymous app: it gets its producer and consumer"
                    " on a topic when the topic is opened to token-less zbus clients"
                    " (application zbus_open)."
                }
            )
        name = attrs.get("name")
        renamed = self.instance is None or name != self.instance.name
        if name and renamed and anonymous.is_reserved(name):
            raise serializers.ValidationError({"name": RESERVED_HELP})


class ProducerPolicySerializer(PolicySerializerBase):
    weights = serializers.DictField(
        child=StrictIntegerField(min_value=0, max_value=MAX_WEIGHT),
        required=False,
        validators=[validate_broker_weights],
        help_text='Per-broker weights 0–10000 keyed by broker id (digits), e.g. {"1": 100,'
        ' "2": 50}; each id a broker of the topic\'s cluster; an empty object weighs every'
        " broker alike. Never null.",
    )

    class Meta:
        model = ProducerPolicy
        fields = [
            "id",
            "name",
            "topic",
            "app",
            "nearby",
            "single",
            "archive",
            "weights",
            "blacklist",
            "timeout_ms",
            "http_enabled",
            "rate_limit",
            "created_at",
            "updated_at",
        ]


class ConsumerPolicySerializer(PolicySerializerBase):
    class Meta:
        model = ConsumerPolicy
        fields = [
            "id",
            "name",
            "topic",
            "app",
            "mode",
            "nearby",
            "paused",
            "archive",
            "retry",
            "sequential",
            "ack_timeout_ms",
            "batch_size",
            "concurrent",
            "delay_ms",
            "blacklist",
            "err_times",
            "max_partition_num",
            "read_retry_probability",
            "http_enabled",
            "rate_limit",
            "pull_timeout_ms",
            "start_position",
            "backlog_alert_enabled",
            "backlog_alert_count",
            "backlog_alert_age_s",
            "failure_alert_per_hour",
            "created_at",
            "updated_at",
        ]


class BrokerUpdateSerializer(FrozenAfterCreate, BrokerSerializer):
    """A broker's id names it to clients and other brokers: fixed once created."""

    frozen_fields = ("id",)


class TopicUpdateSerializer(FrozenAfterCreate, TopicSerializer):
    """A topic's code, cluster and partition layout are fixed once created."""

    frozen_fields = ("code", "cluster", "partitions", "partition_groups")


class AppUpdateSerializer(FrozenAfterCreate, AppSerializer):
    """An app's code is what its clients send: fixed once created."""

    frozen_fields = ("code",)


class ProducerPolicyUpdateSerializer(FrozenAfterCreate, ProducerPolicySerializer):
    """A producer's topic and app are fixed: another pair is another policy."""

    frozen_fields = ("topic", "app")


class ConsumerPolicyUpdateSerializer(FrozenAfterCreate, ConsumerPolicySerializer):
    """A consumer's topic and app are fixed: another pair is another policy."""

    frozen_fields = ("topic", "app")


class RefusalSerializer(serializers.Serializer):
    """What the engine refused an app on one topic in the last hour."""

    topic = serializers.CharField()
    refused = serializers.IntegerField(help_text="Messages refused in the last hour.")
    by_reason = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Messages per reason: rate_limited, too_large, invalid, not_allowed (no"
        " producer policy, a blacklisted address), queue_full.",
    )


@functools.cache
def time_zones() -> frozenset[str]:
    """The IANA time zone names this system knows (read from disk once)."""
    return frozenset(zoneinfo.available_timezones())


TRAFFIC_RULE_FIELDS = (
    "operand",
    "operator",
    "threshold",
    "every_minutes",
    "active_from",
    "active_to",
    "time_zone",
)
"""What an application sets of a traffic rule (the rest is the rule's own)."""


class TrafficRuleSerializer(StrictModelSerializer):
    """A topic's traffic alert rule (see :mod:`mqcloud.alerts.rules`)."""

    topic = serializers.CharField(source="topic.code", read_only=True)
    every_minutes = StrictIntegerField(min_value=1, max_value=1440, required=False)
    description = serializers.CharField(source="describe", read_only=True)

    class Meta:
        model = TrafficRule
        read_only_fields = ["id", "topic", "description", "checked_at", "created_at"]
        fields = [*read_only_fields[:2], *TRAFFIC_RULE_FIELDS, *read_only_fields[2:]]

    def validate(self, attrs: dict) -> dict:
        change = measures_change(attrs.get("operand", ""))
        threshold = attrs.get("threshold", 0.0)
        if change and threshold < -100:
            raise serializers.ValidationError(
                {"threshold": "A change is −100 % (it stopped) or more."}
            )
        if not change and threshold < 0:
            raise serializers.ValidationError({"threshold": "A count is 0 or more."})
        if (attrs.get("active_from") is None) != (attrs.get("active_to") is None):
            raise serializers.ValidationError(
                {"active_to": "Give both ends of the daily window, or neither."}
            )
        return attrs

    def validate_time_zone(self, value: str) -> str:
        if value not in time_zones():
            raise serializers.ValidationError(
                f"Not a time zone: {value!r}; use an IANA name, e.g. UTC or Asia/Shanghai."
            )
        return value
