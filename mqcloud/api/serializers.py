"""Serializers of the catalog API; model validation (``full_clean``) runs on every write."""

from __future__ import annotations

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
from mqcloud.api.scoping import is_platform_admin, user_teams
from mqcloud.console.lag import RATE_MINUTES
from mqcloud.zbus_access import OPEN_HELP

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


class TeamField(serializers.SlugRelatedField):
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


class ClusterSerializer(ModelCleanMixin, serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "description", "created_at"]


class BrokerSerializer(ModelCleanMixin, serializers.ModelSerializer):
    id = serializers.IntegerField(min_value=1, max_value=2_147_483_647)
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())

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

    def validate_id(self, value: int) -> int:
        if self.instance is not None and value != self.instance.id:
            raise serializers.ValidationError("A broker's id cannot change.")
        return value


class PartitionGroupSerializer(serializers.ModelSerializer):
    class Meta:
        model = PartitionGroup
        fields = ["group_id", "leader", "partitions"]
        read_only_fields = fields


class TopicSerializer(ModelCleanMixin, serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    team = TeamField()
    groups = PartitionGroupSerializer(many=True, read_only=True)
    partition_groups = serializers.IntegerField(
        write_only=True,
        required=False,
        min_value=1,
        max_value=1024,
        help_text="Number of partition groups to create (default: one per writable broker,"
        " at most one per partition). Only on creation.",
    )
    zbus_token = serializers.CharField(
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
            "delivery_mode",
            "max_queue_size",
            "overflow_policy",
            "message_ttl_ms",
            "dead_letter_enabled",
            "max_retry_attempts",
            "zbus_mode",
            "zbus_token",
            "zbus_token_set",
            "zbus_open",
            "produce_rate_per_s",
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
        if self.instance is not None:
            for frozen in ("code", "cluster", "partitions", "partition_groups"):
                if frozen in attrs and getattr(self.instance, frozen, None) != attrs[frozen]:
                    raise serializers.ValidationError(
                        {frozen: "Cannot change after the topic is created."}
                    )
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


class AppSerializer(ModelCleanMixin, serializers.ModelSerializer):
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
        if self.instance is not None and value != self.instance.code:
            raise serializers.ValidationError("An app's code cannot change.")
        if self.instance is None and anonymous.is_reserved(value):
            raise serializers.ValidationError(RESERVED_HELP)
        return value

    @transaction.atomic
    def create(self, validated_data: dict) -> App:
        app = super().create(validated_data)
        app._issued_token = app.issue_token()
        return app


class PolicySerializerBase(ModelCleanMixin, serializers.ModelSerializer):
    """Shared fields of producer and consumer policies: topic and app by code."""

    topic = serializers.SlugRelatedField(slug_field="code", queryset=Topic.objects.all())
    app = serializers.SlugRelatedField(slug_field="code", queryset=App.objects.none())
    name = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=255,
        help_text="Unique name; defaults to <app>.<topic>.",
    )

    def get_fields(self) -> dict:
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None:
            fields["app"].queryset = App.objects.filter(team__in=user_teams(request.user))
        return fields

    def validate(self, attrs: dict) -> dict:
        if self.instance is not None:
            for frozen in ("topic", "app"):
                if frozen in attrs and getattr(self.instance, frozen) != attrs[frozen]:
                    raise serializers.ValidationError(
                        {frozen: "Cannot change; create a new policy."}
                    )
        if not attrs.get("name") and self.instance is None and "app" in attrs and "topic" in attrs:
            attrs["name"] = f"{attrs['app'].code}.{attrs['topic'].code}"
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
            "created_at",
            "updated_at",
        ]
