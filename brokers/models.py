"""The catalog: clusters, brokers, topics and their partition groups, apps and policies.

Everything a broker needs to answer JMQ4 FETCH_CLUSTER and everything MQCloud tracks
lives here. Validation sits on the fields and in ``clean()`` with clear messages, and is
backed by database constraints so no other writer can store an invalid row. The engine
never reads these models: ``brokers.catalog_loader`` turns them into frozen snapshots.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from brokers.engine.catalog import hash_token
from brokers.topic_codes import TOPIC_CODE_MAX
from brokers.validators import (
    APP_CODE_MAX,
    name_validator,
    topic_code_validators,
    validate_broker_weights,
    validate_ip_list,
    validate_zbus_name,
)

SILENCE_ALERT_MAX_MINUTES = 1440
"""The longest silence a topic's silence alert waits for: a day."""


PORT = [MinValueValidator(1), MaxValueValidator(65535)]


class Team(models.Model):
    """A group of users that owns apps and topics."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.CharField(max_length=500, blank=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="TeamMembership", related_name="teams"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TeamMembership(models.Model):
    """A user's membership of a team, with the role they play in it."""

    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        ADMIN = "admin", "Team admin"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="team_member_once"),
            models.CheckConstraint(
                condition=Q(role__in=["member", "admin"]), name="team_membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Cluster(models.Model):
    """A set of brokers sharing one Redis store."""

    name = models.CharField(max_length=100, unique=True, validators=[name_validator])
    description = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Broker(models.Model):
    """One broker process: its address, ports, permissions and liveness."""

    class Status(models.TextChoices):
        UP = "up", "Up"
        DOWN = "down", "Down"
        UNKNOWN = "unknown", "Unknown"

    id = models.PositiveIntegerField(
        primary_key=True,
        validators=[MinValueValidator(1), MaxValueValidator(2_147_483_647)],
        help_text="Broker id as it travels on the wire (JMQ4 INT).",
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="brokers")
    host = models.CharField(max_length=255)
    jmq4_port = models.PositiveIntegerField(default=50088, validators=PORT)
    zbus_port = models.PositiveIntegerField(default=15555, validators=PORT)
    vibemq_port = models.PositiveIntegerField(default=2925, validators=PORT)
    data_center = models.CharField(max_length=100, blank=True)
    weight = models.PositiveIntegerField(
        default=100, validators=[MinValueValidator(0), MaxValueValidator(10000)]
    )
    readable = models.BooleanField(default=True)
    writable = models.BooleanField(default=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.UNKNOWN)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    up_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the broker last came up (unset while down): the preferred-leader "
        "rebalance gives a broker its groups back only after it has been up a while.",
    )

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(id__gte=1), name="broker_id_positive"),
            models.CheckConstraint(
                condition=Q(jmq4_port__gte=1, jmq4_port__lte=65535)
                & Q(zbus_port__gte=1, zbus_port__lte=65535)
                & Q(vibemq_port__gte=1, vibemq_port__lte=65535),
                name="broker_ports_in_range",
            ),
            models.CheckConstraint(condition=Q(weight__lte=10000), name="broker_weight_range"),
            models.UniqueConstraint(fields=["host", "jmq4_port"], name="broker_jmq4_address"),
            models.UniqueConstraint(fields=["host", "zbus_port"], name="broker_zbus_address"),
            models.UniqueConstraint(fields=["host", "vibemq_port"], name="broker_vibemq_address"),
        ]

    def __str__(self) -> str:
        return f"broker {self.id} ({self.host})"

    def clean(self) -> None:
        ports = [self.jmq4_port, self.zbus_port, self.vibemq_port]
        if None not in ports and len(set(ports)) != 3:
            raise ValidationError("The JMQ4, zbus and VibeMQ ports must differ.")


PER_SECOND_LIMIT_MAX = 1_000_000
"""The highest per-second limit a topic takes (send, send-back)."""


def per_second_limit(help_text: str) -> models.PositiveIntegerField:
    """A topic's optional limit of messages a second, 1 to :data:`PER_SECOND_LIMIT_MAX`
    (empty: none)."""
    return models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(PER_SECOND_LIMIT_MAX)],
        help_text=help_text,
    )


class Topic(models.Model):
    """A topic: partitions in partition groups, retention and per-protocol settings."""

    class Type(models.TextChoices):
        NORMAL = "normal", "Normal"
        BROADCAST = "broadcast", "Broadcast"
        SEQUENTIAL = "sequential", "Sequential"

    class DeliveryMode(models.TextChoices):
        ROUND_ROBIN = "RoundRobin"
        FAN_OUT_WITH_ACK = "FanOutWithAck"
        FAN_OUT_WITHOUT_ACK = "FanOutWithoutAck"
        PRIORITY_BASED = "PriorityBased"

    class Overflow(models.TextChoices):
        DROP_OLDEST = "DropOldest"
        DROP_NEWEST = "DropNewest"
        BLOCK_PUBLISHER = "BlockPublisher"
        REDIRECT_TO_DLQ = "RedirectToDlq"

    class SurgeReceiver(models.TextChoices):
        PRODUCER = "producer", "Teams of its producers"
        CONSUMER = "consumer", "Teams of its consumers"
        ADMIN = "admin", "Platform admins"
        NOBODY = "nobody", "Nobody (no traffic alerts)"

    code = models.CharField(
        max_length=TOPIC_CODE_MAX,
        unique=True,
        validators=topic_code_validators,
        help_text="Unique across all clusters: letters, digits, '.', '_' or '-'.",
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="topics")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="topics")
    type = models.CharField(max_length=12, choices=Type.choices, default=Type.NORMAL)
    partitions = models.PositiveIntegerField(
        default=4, validators=[MinValueValidator(1), MaxValueValidator(1024)]
    )
    retention_max_age_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(60)],
        help_text="Messages older than this many seconds are trimmed (empty: keep).",
    )
    retention_max_count = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="At most this many messages per partition are kept (empty: no limit).",
    )
    send_limit = per_second_limit(
        "Messages per second the topic takes from all its producers together, "
        "across the cluster and every protocol (empty: unlimited; each producer's own rate "
        "limit applies as well)."
    )
    send_back_limit = per_second_limit(
        "Failed messages per second the topic's consumers together may send back "
        "for a retry (copies into their retry store: JMQ4 acks with a retry type); past it "
        "a failed run is not copied but delivered again, as on a sequential topic (empty: "
        "unlimited)."
    )
    # VibeMQ queue settings.
    delivery_mode = models.CharField(
        max_length=20, choices=DeliveryMode.choices, default=DeliveryMode.ROUND_ROBIN
    )
    max_queue_size = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(10_000_000)],
        help_text="Most unsettled messages per partition, counted on the slowest consumer "
        "group whatever protocol produces or consumes (empty: no bound; retention applies).",
    )
    overflow_policy = models.CharField(
        max_length=20, choices=Overflow.choices, default=Overflow.DROP_OLDEST
    )
    message_ttl_ms = models.PositiveBigIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    dead_letter_enabled = models.BooleanField(default=False)
    dead_letter_queue = models.CharField(
        max_length=TOPIC_CODE_MAX,
        blank=True,
        validators=topic_code_validators,
        help_text="Where dead letters go (empty: <code>.dlq); served under this topic's"
        " policies unless a topic of that name exists.",
    )
    max_retry_attempts = models.PositiveSmallIntegerField(
        default=3, validators=[MaxValueValidator(100)]
    )
    # zbus MQ settings.
    zbus_mode = models.PositiveSmallIntegerField(
        default=1,
        validators=[MaxValueValidator(7)],
        help_text="zbus mqMode bit set: 1 MQ, 2 PubSub, 4 Temp.",
    )
    zbus_token_hash = models.CharField(max_length=64, blank=True, editable=False)
    zbus_name = models.CharField(
        max_length=255,
        unique=True,
        null=True,
        blank=True,
        default=None,
        validators=[validate_zbus_name],
        help_text="The name zbus clients call this MQ, where that cannot be a code (it holds"
        " ':', '{' or letters beyond ASCII, say); empty: they use the code.",
    )
    surge_alert_receiver = models.CharField(
        max_length=8,
        choices=SurgeReceiver.choices,
        default=SurgeReceiver.PRODUCER,
        help_text="Who is alerted when the topic's traffic surges past its usual daily peaks"
        " or stops (see silence_alert_minutes).",
    )
    silence_alert_minutes = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(SILENCE_ALERT_MAX_MINUTES)],
        help_text="Alert the traffic-alert receiver when nothing was produced to the topic"
        f" for this many minutes (1–{SILENCE_ALERT_MAX_MINUTES}); 0: never.",
    )
    creator = models.CharField(max_length=255, blank=True)
    description = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]
        constraints = [
            models.CheckConstraint(
                condition=Q(partitions__gte=1, partitions__lte=1024),
                name="topic_partitions_range",
            ),
            models.CheckConstraint(
                condition=Q(type__in=["normal", "broadcast", "sequential"]),
                name="topic_type_valid",
            ),
            models.CheckConstraint(
                condition=Q(retention_max_age_s__isnull=True) | Q(retention_max_age_s__gte=60),
                name="topic_retention_age_min",
            ),
            models.CheckConstraint(
                condition=Q(retention_max_count__isnull=True) | Q(retention_max_count__gte=1),
                name="topic_retention_count_min",
            ),
            models.CheckConstraint(
                condition=Q(max_queue_size__isnull=True)
                | Q(max_queue_size__gte=1, max_queue_size__lte=10_000_000),
                name="topic_max_queue_size_range",
            ),
            models.CheckConstraint(
                condition=Q(max_retry_attempts__lte=100), name="topic_max_retry_range"
            ),
            models.CheckConstraint(condition=Q(zbus_mode__lte=7), name="topic_zbus_mode_bits"),
            models.CheckConstraint(
                condition=~Q(overflow_policy="RedirectToDlq") | Q(dead_letter_enabled=True),
                name="topic_redirect_needs_dlq",
            ),
        ]

    def __str__(self) -> str:
        return self.code

    def clean(self) -> None:
        if self.overflow_policy == self.Overflow.REDIRECT_TO_DLQ and not self.dead_letter_enabled:
            raise ValidationError(
                {"dead_letter_enabled": "RedirectToDlq overflow needs the dead-letter queue on."}
            )
        if self.dead_letter_queue and self.dead_letter_queue == self.code:
            raise ValidationError(
                {"dead_letter_queue": "A topic's dead letters cannot go back into it."}
            )

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.zbus_name:
            self.zbus_name = None  # unique: "no zbus name" must not collide with another
        super().save(*args, **kwargs)

    def set_zbus_token(self, token: str) -> None:
        """Set (or clear, with "") the zbus MQ access token; only its hash is kept."""
        self.zbus_token_hash = hash_token(token) if token else ""


class PartitionGroup(models.Model):
    """A group of partitions of one topic, led by one broker."""

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="groups")
    group_id = models.PositiveIntegerField()
    leader = models.ForeignKey(Broker, on_delete=models.PROTECT, related_name="led_groups")
    preferred_leader = models.ForeignKey(
        Broker,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="preferred_groups",
        help_text="The broker that should lead this group (the leader it was created with): "
        "the preferred-leader rebalance moves the group back to it once it is up and healthy.",
    )
    partitions = models.JSONField(help_text="Partition numbers of this group.")

    class Meta:
        ordering = ["topic", "group_id"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "group_id"], name="group_id_per_topic"),
        ]

    def __str__(self) -> str:
        return f"{self.topic.code}/group {self.group_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A group without a preferred leader prefers the leader it is saved with."""
        if self.preferred_leader_id is None and self.leader_id is not None:
            self.preferred_leader_id = self.leader_id
            fields = kwargs.get("update_fields")
            if fields is not None:
                kwargs["update_fields"] = {*fields, "preferred_leader"}
        super().save(*args, **kwargs)

    def clean(self) -> None:
        parts = self.partitions
        if not isinstance(parts, list) or not parts:
            raise ValidationError({"partitions": "Must be a non-empty list of partitions."})
        if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in parts):
            raise ValidationError({"partitions": "Partitions are integers ≥ 0."})
        if len(set(parts)) != len(parts):
            raise ValidationError({"partitions": "A partition may appear only once."})
        if self.topic_id and any(p >= self.topic.partitions for p in parts):
            raise ValidationError(
                {"partitions": f"The topic has partitions 0–{self.topic.partitions - 1} only."}
            )


class App(models.Model):
    """An application: the identity producers and consumers authenticate as."""

    code = models.CharField(max_length=APP_CODE_MAX, unique=True, validators=[name_validator])
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="apps")
    description = models.CharField(max_length=500, blank=True)
    is_admin = models.BooleanField(
        default=False, help_text="An admin app may act for every app (JMQ4 session rule)."
    )
    is_anonymous = models.BooleanField(
        default=False,
        editable=False,
        help_text="The team's anonymous app: what token-less clients act as on the team's "
        "topics opened to them (brokers.anonymous). It has no tokens.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]
        constraints = [
            models.UniqueConstraint(
                fields=["team"], condition=Q(is_anonymous=True), name="one_anonymous_app_per_team"
            ),
        ]

    def __str__(self) -> str:
        return self.code

    def issue_token(self, token: str | None = None, *, revoke_others: bool = True) -> str:
        """Create a token for this app and return it; only its hash is stored.

        Rotation revokes the previous tokens unless ``revoke_others`` is false.
        """
        from django.utils import timezone

        if self.is_anonymous:
            raise ValidationError(
                "An anonymous app has no tokens: it is what token-less clients act as."
            )
        token = token or f"mqa_{secrets.token_urlsafe(32)}"
        if revoke_others:
            self.tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        AppToken.objects.create(app=self, token_hash=hash_token(token), hint=token[-4:])
        return token

    def active_token_hashes(self) -> list[str]:
        """Hashes of the tokens that are not revoked."""
        return [t.token_hash for t in self.tokens.all() if t.revoked_at is None]


class AppToken(models.Model):
    """A hashed app token; the token itself is shown once, when it is issued."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=4, help_text="Last characters, to tell tokens apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.app.code} token …{self.hint}"


POLICY_NAME_MAX = 255


def fit_policy_name(name: str, key: str, attempt: int = 0) -> str:
    """``name`` when it fits :data:`POLICY_NAME_MAX` (attempt 0); else, or on a later
    attempt, cut short and marked with a digest of ``key`` — and ``-<attempt>`` from
    the second on —, so the same key gets the same name."""
    if attempt == 0 and len(name) <= POLICY_NAME_MAX:
        return name
    tail = hashlib.sha256(key.encode()).hexdigest()[:12]
    if attempt > 1:
        tail += f"-{attempt}"
    return f"{name[: POLICY_NAME_MAX - len(tail) - 1]}-{tail}"


class PolicyBase(models.Model):
    """Fields shared by producer and consumer policies (one app on one topic)."""

    name = models.CharField(
        max_length=POLICY_NAME_MAX,
        unique=True,
        validators=[name_validator],
        blank=True,
        help_text="Unique in the catalog; defaults to <app>.<topic> (cut short and marked"
        " with a digest when that is too long or taken). HTTP-MQ addresses it.",
    )
    topic = models.ForeignKey(Topic, on_delete=models.CASCADE)
    app = models.ForeignKey(App, on_delete=models.CASCADE)
    nearby = models.BooleanField(default=False)
    archive = models.BooleanField(default=False)
    blacklist = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_ip_list],
        help_text="IP addresses or networks refused by the broker.",
    )
    http_enabled = models.BooleanField(default=False)
    rate_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(1_000_000)],
        help_text="Messages per second across the cluster (empty: unlimited).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.name

    def save(self, *args: object, **kwargs: object) -> None:
        if not self.name and self.app_id and self.topic_id:
            self.name = self.default_name(self.app, self.topic, policy=self.pk)
        super().save(*args, **kwargs)

    def clean(self) -> None:
        if not self.name and self.app_id and self.topic_id:
            self.name = self.default_name(self.app, self.topic, policy=self.pk)

    @classmethod
    def default_name(cls, app: App, topic: Topic, *, policy: int | None = None) -> str:
        """``<app>.<topic>`` while that fits :data:`POLICY_NAME_MAX` and no policy of
        this kind has it. Otherwise (a 100-character app on a 200-character topic; ``a.b``
        on ``c`` after ``a`` on ``b.c``) it is cut short and marked with a digest of the
        pair, so the same pair gets the same name whenever it is free. ``policy``: the
        id of the policy being named again (its name cleared), whose own name is free."""
        name, key = f"{app.code}.{topic.code}", f"{app.code}\0{topic.code}"
        attempt = 0 if len(name) <= POLICY_NAME_MAX else 1
        candidate = fit_policy_name(name, key, attempt)
        others = cls.objects.exclude(pk=policy) if policy is not None else cls.objects
        while others.filter(name=candidate).exists():
            attempt += 1
            candidate = fit_policy_name(name, key, attempt)
        return candidate


class ProducerPolicy(PolicyBase):
    """How one app produces to one topic (JMQ4 producer policy, MQCloud producer)."""

    single = models.BooleanField(default=False)
    weights = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_broker_weights],
        help_text='Per-broker weights, e.g. {"1": 100, "2": 50}.',
    )
    timeout_ms = models.PositiveIntegerField(
        default=5000, validators=[MinValueValidator(100), MaxValueValidator(600_000)]
    )

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "producer policies"
        constraints = [
            models.UniqueConstraint(fields=["topic", "app"], name="producer_once_per_app_topic"),
            models.CheckConstraint(
                condition=Q(timeout_ms__gte=100, timeout_ms__lte=600_000),
                name="producer_timeout_range",
            ),
            models.CheckConstraint(
                condition=Q(rate_limit__isnull=True) | Q(rate_limit__gte=1),
                name="producer_rate_limit_min",
            ),
        ]

    def clean(self) -> None:
        super().clean()
        if self.topic_id and isinstance(self.weights, dict) and self.weights:
            brokers = set(
                Broker.objects.filter(cluster_id=self.topic.cluster_id).values_list("id", flat=True)
            )
            unknown = sorted(k for k in self.weights if k.isdigit() and int(k) not in brokers)
            if unknown:
                raise ValidationError(
                    {"weights": f"Not brokers of the topic's cluster: {', '.join(unknown)}."}
                )


FAN_OUT_MODES = (
    Topic.DeliveryMode.FAN_OUT_WITH_ACK,
    Topic.DeliveryMode.FAN_OUT_WITHOUT_ACK,
)


class ConsumerPolicy(PolicyBase):
    """How one app consumes one topic (JMQ4 consumer policy, MQCloud consumer)."""

    class Mode(models.TextChoices):
        CLUSTERING = "clustering", "Clustering"
        BROADCAST = "broadcast", "Broadcast"

    paused = models.BooleanField(default=False)
    retry = models.BooleanField(default=True)
    sequential = models.BooleanField(default=False)
    ack_timeout_ms = models.PositiveIntegerField(
        default=300_000, validators=[MinValueValidator(1000), MaxValueValidator(129_600_000)]
    )
    batch_size = models.PositiveSmallIntegerField(
        default=32, validators=[MinValueValidator(1), MaxValueValidator(1000)]
    )
    concurrent = models.PositiveIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(1000)]
    )
    delay_ms = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(7 * 24 * 3600 * 1000)]
    )
    err_times = models.PositiveIntegerField(
        default=16,
        validators=[MaxValueValidator(1000)],
        help_text="Failed deliveries before the dead-letter queue (0: unlimited).",
    )
    max_partition_num = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(1024)],
        help_text="Partitions one connection may hold at once (0: no limit).",
    )
    read_retry_probability = models.PositiveSmallIntegerField(
        default=10, validators=[MaxValueValidator(100)], help_text="Percent."
    )
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.CLUSTERING)
    pull_timeout_ms = models.PositiveIntegerField(
        default=10_000,
        validators=[MinValueValidator(1000), MaxValueValidator(60_000)],
        help_text="How long an HTTP-MQ fetch may wait for the store.",
    )
    start_position = models.CharField(
        max_length=10,
        choices=[("latest", "Latest"), ("earliest", "Earliest")],
        default="latest",
        help_text="Where a new consumer starts: the end when it was approved, or the start.",
    )
    backlog_alert_count = models.PositiveIntegerField(
        default=10_000, validators=[MinValueValidator(1)]
    )
    backlog_alert_age_s = models.PositiveIntegerField(
        default=300, validators=[MinValueValidator(1)]
    )
    backlog_alert_enabled = models.BooleanField(default=True)
    failure_alert_per_hour = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(10_000_000)],
        help_text="Alert when it failed this many messages in the last hour (empty: the"
        " platform's default, CONSUME_FAILURE_ALERT_PER_HOUR; 0: never).",
    )

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "consumer policies"
        constraints = [
            models.UniqueConstraint(fields=["topic", "app"], name="consumer_once_per_app_topic"),
            models.CheckConstraint(
                condition=Q(ack_timeout_ms__gte=1000, ack_timeout_ms__lte=129_600_000),
                name="consumer_ack_timeout_range",
            ),
            models.CheckConstraint(
                condition=Q(batch_size__gte=1, batch_size__lte=1000),
                name="consumer_batch_size_range",
            ),
            models.CheckConstraint(
                condition=Q(read_retry_probability__lte=100),
                name="consumer_read_retry_percent",
            ),
            models.CheckConstraint(
                condition=Q(mode__in=["clustering", "broadcast"]), name="consumer_mode_valid"
            ),
            models.CheckConstraint(
                condition=Q(pull_timeout_ms__gte=1000, pull_timeout_ms__lte=60_000),
                name="consumer_pull_timeout_range",
            ),
            models.CheckConstraint(
                condition=Q(start_position__in=["latest", "earliest"]),
                name="consumer_start_position_valid",
            ),
            models.CheckConstraint(
                condition=Q(rate_limit__isnull=True) | Q(rate_limit__gte=1),
                name="consumer_rate_limit_min",
            ),
        ]

    @property
    def fan_out_members(self) -> bool:
        """Whether its clients are the members of a fan-out queue (VibeMQ FanOutWithAck or
        FanOutWithoutAck subscribers), each with progress and retries of its own."""
        return self.mode != self.Mode.BROADCAST and self.topic.delivery_mode in FAN_OUT_MODES

    @property
    def per_client(self) -> bool:
        """Whether its clients each have progress and retries of their own: a broadcast
        consumer's clients, or a fan-out queue's members."""
        broadcast = self.mode == self.Mode.BROADCAST or self.topic.type == Topic.Type.BROADCAST
        return broadcast or self.fan_out_members

    def clean(self) -> None:
        super().clean()
        broadcast_topic = self.topic_id and self.topic.type == Topic.Type.BROADCAST
        if broadcast_topic and self.mode != self.Mode.BROADCAST:
            raise ValidationError({"mode": "A broadcast topic is consumed in broadcast mode."})
        if self.sequential and self.mode == self.Mode.BROADCAST:
            raise ValidationError({"sequential": "Sequential consumption needs clustering mode."})
