"""Application forms: one Django form per application kind, each building the payload.

A form only shapes what a person types into the kind's payload; the approvals service
validates it (with the REST API's serializers) and its errors come back inline through
:func:`add_service_errors`. Nothing here changes the catalog.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from brokers.models import (
    PER_SECOND_LIMIT_MAX,
    SILENCE_ALERT_MAX_MINUTES,
    Broker,
    Cluster,
    ConsumerPolicy,
    ProducerPolicy,
    TeamMembership,
    Topic,
)
from brokers.topic_codes import TOPIC_CODE_MAX
from mqcloud.alerts.models import TrafficRule
from mqcloud.approvals.models import Kind
from mqcloud.console import access

SELECT_LIMIT = 200  # more choices than this: a checked text box instead of a <select>
TIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M")


def parse_utc(text: str) -> int:
    """``YYYY-MM-DD HH:MM:SS[.mmm]`` (UTC) as epoch milliseconds; ValueError if neither."""
    text = text.strip()
    for fmt in TIME_FORMATS:
        try:
            return int(datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp() * 1000)
        except ValueError:
            continue
    raise ValueError("Use YYYY-MM-DD HH:MM:SS.mmm (UTC).")


class UtcTimeField(forms.CharField):
    """A UTC time typed as text with millisecond precision, cleaned to epoch ms."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "UTC, YYYY-MM-DD HH:MM:SS.mmm")
        kwargs.setdefault(
            "widget", forms.TextInput(attrs={"placeholder": "2025-01-31 23:59:00.000"})
        )
        super().__init__(**kwargs)

    def clean(self, value: Any) -> int | None:
        value = super().clean(value)
        if not value:
            return None
        try:
            return parse_utc(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


def parse_ip_lines(text: str) -> list[str]:
    """One address or network per line (or comma-separated)."""
    return [p.strip() for p in text.replace(",", "\n").splitlines() if p.strip()]


def _whole(text: str) -> bool:
    """``text`` is a whole number written in ASCII digits (``str.isdigit`` alone also
    passes ``²``, which ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def parse_ids(text: str) -> list[int]:
    """Comma-separated whole numbers (message ids), blanks ignored."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if any(not _whole(p) for p in parts):
        raise forms.ValidationError("Ids are whole numbers, comma-separated.")
    return [int(p) for p in parts]


def parse_weights(text: str) -> dict[str, int]:
    """``broker=weight`` pairs, one per line or comma-separated."""
    weights: dict[str, int] = {}
    for part in parse_ip_lines(text):
        broker, sep, weight = part.partition("=")
        if not sep or not _whole(broker.strip()) or not _whole(weight.strip().lstrip("-")):
            raise forms.ValidationError(f"{part!r}: write broker=weight, e.g. 1=100.")
        weights[broker.strip()] = int(weight.strip())
    return weights


class ApplicationForm(forms.Form):
    """Base: a kind, the user it is filed for, and the payload it builds."""

    kind: str = ""
    title: str = ""
    help: str = ""

    def __init__(self, *args: Any, user: AbstractBaseUser, **kwargs: Any) -> None:
        self.user = user
        super().__init__(*args, **kwargs)
        self.setup()

    def setup(self) -> None:
        """Narrow choices to what the user may use."""

    def choose(self, field: str, names: QuerySet, attr: str) -> None:
        """Let ``field`` take one of ``names``: a ``<select>`` of up to SELECT_LIMIT, else
        a checked text box (a select of 10,000 topics would be a page of 500 kB)."""
        first = list(names[: SELECT_LIMIT + 1])
        if len(first) <= SELECT_LIMIT:
            self.fields[field].choices = [(n, n) for n in first]
        else:
            self.fields[field] = NameOf(names, attr, self.fields[field])

    def payload(self) -> dict[str, Any]:
        return {k: v for k, v in self.cleaned_data.items() if v not in (None, "")}


def _consumer_choices(user: AbstractBaseUser) -> QuerySet:
    rows = ConsumerPolicy.objects.all()
    if not access.is_platform_admin(user):
        rows = rows.filter(app__team__in=access.user_teams(user))
    return rows.order_by("name").values_list("name", flat=True)


def _producer_choices(user: AbstractBaseUser) -> QuerySet:
    rows = ProducerPolicy.objects.all()
    if not access.is_platform_admin(user):
        rows = rows.filter(app__team__in=access.user_teams(user))
    return rows.order_by("name").values_list("name", flat=True)


def _app_choices(user: AbstractBaseUser) -> QuerySet:
    """Apps a producer or consumer may be applied for (anonymous apps get theirs by
    opening a topic to token-less zbus clients)."""
    apps = access.apps_for(user).filter(is_anonymous=False)
    return apps.order_by("code").values_list("code", flat=True)


def _topic_choices(user: AbstractBaseUser, *, own: bool) -> QuerySet:
    topics = access.topics_for(user) if own else Topic.objects.all()
    return topics.order_by("code").values_list("code", flat=True)


class NameOf(forms.CharField):
    """One name of a set too large for a ``<select>`` (a fleet's topics or consumers): a
    text box whose value must be in the set (one indexed query)."""

    def __init__(self, names: QuerySet, attr: str, field: forms.Field) -> None:
        super().__init__(
            max_length=TOPIC_CODE_MAX,  # a topic code, or a policy name (255)
            required=field.required,
            label=field.label,
            help_text=field.help_text or f"Type the exact name ({names.count()} to choose from).",
            initial=field.initial,
        )
        self.names, self.attr = names, attr

    def clean(self, value: Any) -> str:
        value = super().clean(value)
        if value and not self.names.filter(**{self.attr: value}).exists():
            raise forms.ValidationError(f"No such name you may choose: {value!r}.")
        return value


def _silence_field(help_text: str) -> forms.IntegerField:
    """A topic's ``silence_alert_minutes`` (the traffic-silence alert)."""
    return forms.IntegerField(
        min_value=0,
        max_value=SILENCE_ALERT_MAX_MINUTES,
        required=False,
        label="Alert when nothing is produced for (minutes)",
        help_text=help_text,
    )


SEND_LIMIT_LABEL = "Send limit (messages/s, all producers together)"
SEND_BACK_LIMIT_LABEL = (
    "Send-back limit (failed messages/s copied for a retry, all consumers together)"
)


def _per_second_field(label: str, help_text: str) -> forms.IntegerField:
    """A topic's send or send-back limit (1 to PER_SECOND_LIMIT_MAX a second; empty: none)."""
    return forms.IntegerField(
        min_value=1,
        max_value=PER_SECOND_LIMIT_MAX,
        required=False,
        label=label,
        help_text=help_text,
    )


class TopicCreateForm(ApplicationForm):
    kind = Kind.TOPIC_CREATE
    title = "Apply for a topic"
    help = "Partitions are laid out in groups led by the cluster's writable brokers."
    code = forms.CharField(
        max_length=TOPIC_CODE_MAX,
        help_text="Unique across all clusters: letters, digits, '.', '_' or '-'.",
    )
    team = forms.ChoiceField()
    cluster = forms.ChoiceField()
    type = forms.ChoiceField(choices=Topic.Type.choices, initial=Topic.Type.NORMAL)
    partitions = forms.IntegerField(min_value=1, max_value=1024, initial=4)
    partition_groups = forms.IntegerField(
        min_value=1, max_value=1024, required=False, help_text="Default: one per writable broker."
    )
    retention_max_age_s = forms.IntegerField(
        min_value=60, required=False, label="Retention: max age (s)"
    )
    retention_max_count = forms.IntegerField(
        min_value=1, required=False, label="Retention: max messages per partition"
    )
    send_limit = _per_second_field(
        SEND_LIMIT_LABEL, "Empty: unlimited; each producer's own limit applies as well."
    )
    send_back_limit = _per_second_field(
        SEND_BACK_LIMIT_LABEL, "Empty: unlimited. Past it a failed run is delivered again instead."
    )
    description = forms.CharField(max_length=500, required=False, help_text="Purpose.")
    surge_alert_receiver = forms.ChoiceField(
        choices=Topic.SurgeReceiver.choices,
        initial=Topic.SurgeReceiver.PRODUCER,
        required=False,
        label="Traffic alerts (surge, silence) go to",
    )
    silence_alert_minutes = _silence_field("0 or empty: never.")

    def setup(self) -> None:
        self.fields["team"].choices = [(t.name, t.name) for t in access.user_teams(self.user)]
        self.fields["cluster"].choices = [(c.name, c.name) for c in Cluster.objects.all()]


class TopicUpdateForm(ApplicationForm):
    kind = Kind.TOPIC_UPDATE
    title = "Change a topic"
    code = forms.ChoiceField(label="Topic")
    description = forms.CharField(max_length=500, required=False)
    retention_max_age_s = forms.IntegerField(min_value=60, required=False)
    retention_max_count = forms.IntegerField(min_value=1, required=False)
    send_limit = _per_second_field(
        SEND_LIMIT_LABEL, "Empty: unchanged. Applied within a second of approval."
    )
    send_back_limit = _per_second_field(
        SEND_BACK_LIMIT_LABEL, "Empty: unchanged. Applied within a second of approval."
    )
    surge_alert_receiver = forms.ChoiceField(
        choices=[("", "(unchanged)"), *Topic.SurgeReceiver.choices],
        required=False,
        label="Traffic alerts (surge, silence) go to",
    )
    silence_alert_minutes = _silence_field("0: never; empty: unchanged.")

    def setup(self) -> None:
        self.choose("code", _topic_choices(self.user, own=True), "code")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not any(data.get(f) not in (None, "") for f in self.changed_fields()):
            raise forms.ValidationError("Change at least one field.")
        return data

    @staticmethod
    def changed_fields() -> tuple[str, ...]:
        return (
            "description",
            "retention_max_age_s",
            "retention_max_count",
            "send_limit",
            "send_back_limit",
            "surge_alert_receiver",
            "silence_alert_minutes",
        )

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        changes = {f: d[f] for f in self.changed_fields() if d.get(f) not in (None, "")}
        return {"code": d["code"], "changes": changes}


class TopicDeleteForm(ApplicationForm):
    kind = Kind.TOPIC_DELETE
    title = "Delete a topic"
    help = "Its producers and consumers must be deleted first."
    code = forms.ChoiceField(label="Topic")

    def setup(self) -> None:
        self.choose("code", _topic_choices(self.user, own=True), "code")


class _ZbusAccessForm(ApplicationForm):
    """A kind whose payload is just one of the user's topics."""

    code = forms.ChoiceField(label="Topic")

    def setup(self) -> None:
        self.choose("code", _topic_choices(self.user, own=True), "code")


class ZbusOpenForm(_ZbusAccessForm):
    kind = Kind.ZBUS_OPEN
    title = "Open a topic to token-less zbus clients"
    help = (
        "zbus clients without an app token (and anonymous VibeMQ clients, where the operator"
        " allows them) then produce and consume as the team's anonymous app, through the"
        " topic's anonymous producer and consumer group. The topic's zbus access token, if"
        " set, still applies."
    )


class ZbusCloseForm(_ZbusAccessForm):
    kind = Kind.ZBUS_CLOSE
    title = "Close a topic to token-less zbus clients"
    help = (
        "The topic's anonymous producer and consumer go: zbus clients then need an app token"
        " whose app has a producer or consumer policy on the topic."
    )


class TimeSpanForm(ApplicationForm):
    """A kind that takes a time span: ``start`` and ``end`` (not included), UTC."""

    start = UtcTimeField(label="From")
    end = UtcTimeField(label="To (not included)")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start is not None and end is not None and end <= start:
            self.add_error("end", "The span must end after it starts.")
        return data


class MessageExportForm(TimeSpanForm):
    kind = Kind.MESSAGE_EXPORT
    title = "Export a topic's messages of a time span"
    help = (
        "Every message stored in the span, with its properties and body, is written to a"
        " gzipped JSON Lines file on a worker after approval; the application page then"
        " offers it for download to the topic's team, for a week."
    )
    topic = forms.ChoiceField(label="Topic")
    field_order = ["topic", "start", "end"]

    def setup(self) -> None:
        self.choose("topic", _topic_choices(self.user, own=True), "code")

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {"topic": d["topic"], "from_ms": d["start"], "to_ms": d["end"]}


class TrafficRuleAddForm(ApplicationForm):
    kind = Kind.TRAFFIC_RULE_ADD
    title = "Add a traffic alert rule to a topic"
    help = (
        "The topic's traffic-alert receiver is alerted when the rule matches: a count of the"
        " messages produced over the span, or its change in percent against the span before"
        " (−100: it stopped; 200: it tripled). At most 20 rules per topic."
    )
    code = forms.ChoiceField(label="Topic")
    operand = forms.ChoiceField(choices=TrafficRule.Operand.choices)
    operator = forms.ChoiceField(choices=TrafficRule.Operator.choices)
    threshold = forms.FloatField(help_text="Messages, or percent for a change.")
    every_minutes = forms.IntegerField(
        min_value=1, max_value=1440, initial=5, label="Check every (minutes)"
    )
    active_from = forms.TimeField(required=False, help_text="HH:MM; empty: all day.")
    active_to = forms.TimeField(required=False, help_text="HH:MM; earlier: past midnight.")
    time_zone = forms.CharField(
        max_length=64,
        initial="UTC",
        required=False,
        help_text="Of the daily window: an IANA name, e.g. UTC or Asia/Shanghai.",
    )

    def setup(self) -> None:
        self.choose("code", _topic_choices(self.user, own=True), "code")

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        out = {k: d[k] for k in ("code", "operand", "operator", "threshold", "every_minutes")}
        for end in ("active_from", "active_to"):
            if d.get(end) is not None:
                out[end] = d[end].strftime("%H:%M")
        if d.get("time_zone"):
            out["time_zone"] = d["time_zone"]
        return out


class TrafficRuleDeleteForm(ApplicationForm):
    kind = Kind.TRAFFIC_RULE_DELETE
    title = "Delete a topic's traffic alert rule"
    code = forms.ChoiceField(label="Topic")
    rule = forms.IntegerField(min_value=1, help_text="The rule's id, as the topic page lists it.")

    def setup(self) -> None:
        self.choose("code", _topic_choices(self.user, own=True), "code")


class ProducerCreateForm(ApplicationForm):
    kind = Kind.PRODUCER_CREATE
    title = "Apply to produce to a topic"
    topic = forms.ChoiceField()
    app = forms.ChoiceField()
    http_enabled = forms.BooleanField(required=False, label="Produce over HTTP-MQ")
    rate_limit = forms.IntegerField(min_value=1, max_value=1_000_000, required=False)

    def setup(self) -> None:
        self.choose("topic", _topic_choices(self.user, own=False), "code")
        self.choose("app", _app_choices(self.user), "code")


class ConsumerCreateForm(ApplicationForm):
    kind = Kind.CONSUMER_CREATE
    title = "Apply to consume a topic"
    topic = forms.ChoiceField()
    app = forms.ChoiceField()
    mode = forms.ChoiceField(choices=ConsumerPolicy.Mode.choices)
    start_position = forms.ChoiceField(choices=[("latest", "Latest"), ("earliest", "Earliest")])
    sequential = forms.BooleanField(required=False)
    http_enabled = forms.BooleanField(required=False, label="Consume over HTTP-MQ")
    rate_limit = forms.IntegerField(
        min_value=1, max_value=1_000_000, required=False, label="Flow control (messages/s)"
    )

    def setup(self) -> None:
        self.choose("topic", _topic_choices(self.user, own=False), "code")
        self.choose("app", _app_choices(self.user), "code")


class _PolicyDeleteForm(ApplicationForm):
    name = forms.ChoiceField()


class ProducerDeleteForm(_PolicyDeleteForm):
    kind = Kind.PRODUCER_DELETE
    title = "Delete a producer"

    def setup(self) -> None:
        self.choose("name", _producer_choices(self.user), "name")


class ConsumerDeleteForm(_PolicyDeleteForm):
    kind = Kind.CONSUMER_DELETE
    title = "Delete a consumer"

    def setup(self) -> None:
        self.choose("name", _consumer_choices(self.user), "name")


class ConsumerForm(ApplicationForm):
    """A kind whose payload is just the consumer."""

    consumer = forms.ChoiceField()

    def setup(self) -> None:
        self.choose("consumer", _consumer_choices(self.user), "name")


class PauseForm(ConsumerForm):
    kind = Kind.PAUSE
    title = "Pause a consumer"
    help = "Delivery stops on every broker and proxy within a second of approval."


class ResumeForm(ConsumerForm):
    kind = Kind.RESUME
    title = "Resume a consumer"


class SkipBacklogForm(ConsumerForm):
    kind = Kind.SKIP_BACKLOG
    title = "Skip the backlog"
    help = "Moves the consumer to what was stored in the last 60 s before the run."


class RateLimitForm(ConsumerForm):
    kind = Kind.RATE_LIMIT
    title = "Set a consumer's rate limit"
    rate_limit = forms.IntegerField(
        min_value=1, max_value=1_000_000, required=False, help_text="Empty: unlimited."
    )

    def payload(self) -> dict[str, Any]:
        return {
            "consumer": self.cleaned_data["consumer"],
            "rate_limit": self.cleaned_data["rate_limit"],
        }


class ReconsumeForm(ConsumerForm, TimeSpanForm):
    kind = Kind.RECONSUME
    field_order = ["consumer", "start", "end", "client_id"]
    title = "Re-consume a time span"
    help = (
        "What was stored in the span is delivered to the consumer again, over whatever"
        " protocol its clients speak; its offsets do not move. A broadcast consumer's"
        " client gets it, or each of its clients when none is named. At most 100,000"
        " messages in all: for more, reset the offsets. Runs on a worker after approval."
    )
    client_id = forms.CharField(
        max_length=128, required=False, help_text="Broadcast consumers: one client only."
    )

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        out = {"consumer": d["consumer"], "from_ms": d["start"], "to_ms": d["end"]}
        if d.get("client_id"):
            out["client_id"] = d["client_id"]
        return out


class OffsetResetForm(ConsumerForm):
    kind = Kind.OFFSET_RESET
    title = "Reset a consumer's offsets"
    help = "Runs on a worker after approval; the application page shows its progress."
    position = forms.ChoiceField(
        choices=[
            ("earliest", "Earliest stored message"),
            ("latest", "Latest (skip everything)"),
            ("timestamp", "A point in time"),
            ("index", "An index of one partition"),
        ]
    )
    timestamp = UtcTimeField(required=False, label="Time")
    partition = forms.IntegerField(min_value=0, max_value=1023, required=False)
    index = forms.IntegerField(min_value=0, required=False)
    client_id = forms.CharField(max_length=128, required=False, help_text="Broadcast consumers.")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        position = data.get("position")
        if position == "timestamp" and data.get("timestamp") is None:
            self.add_error("timestamp", "Give the time to reset to.")
        if position == "index":
            if data.get("index") is None:
                self.add_error("index", "Give the index.")
            if data.get("partition") is None:
                self.add_error("partition", "An index reset names a partition.")
        return data

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        out: dict[str, Any] = {"consumer": d["consumer"], "position": d["position"]}
        if d["position"] == "timestamp":
            out["timestamp_ms"] = d["timestamp"]
        if d["position"] == "index":
            out["index"] = d["index"]
        if d.get("partition") is not None:
            out["partition"] = d["partition"]
        if d.get("client_id"):
            out["client_id"] = d["client_id"]
        return out


class DeadLetterResendForm(ConsumerForm):
    kind = Kind.DLQ_RESEND
    title = "Resend dead letters"
    help = "They go back to the consumer's retry store, due at once."
    ids = forms.CharField(
        required=False, help_text="Dead-letter ids, comma-separated. Empty: all of them."
    )

    def clean_ids(self) -> list[int]:
        return parse_ids(self.cleaned_data["ids"])

    def payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {"consumer": self.cleaned_data["consumer"]}
        if self.cleaned_data["ids"]:
            out["ids"] = self.cleaned_data["ids"]
        return out


class RetrySkipForm(ConsumerForm):
    kind = Kind.RETRY_SKIP
    title = "Skip a consumer's retry messages older than a time"
    help = (
        "The consumer's retries that came into its retry store before the time are deleted,"
        " as consumed: only those of messages with the key, when given. A broadcast"
        " consumer's client: that client's own retries; none named: the consumer's and"
        " every client's."
    )
    before = UtcTimeField(label="Came in before")
    business_id = forms.CharField(
        max_length=100, required=False, label="Key", help_text="The messages' business id."
    )
    client_id = forms.CharField(
        max_length=128, required=False, help_text="Broadcast consumers: one client's own."
    )

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        out: dict[str, Any] = {"consumer": d["consumer"], "before_ms": d["before"]}
        for name in ("business_id", "client_id"):
            if d.get(name):
                out[name] = d[name]
        return out


class TimerCancelForm(ApplicationForm):
    kind = Kind.TIMER_CANCEL
    title = "Cancel delayed or timer messages"
    help = (
        "They are never delivered. A message already delivered when the application is"
        " approved is listed in the result, not cancelled."
    )
    topic = forms.ChoiceField(label="Topic")
    ids = forms.CharField(help_text="Delay ids (the timer list's first column), comma-separated.")

    def setup(self) -> None:
        self.choose("topic", _topic_choices(self.user, own=True), "code")

    def clean_ids(self) -> list[int]:
        ids = parse_ids(self.cleaned_data["ids"])
        if not ids:
            raise forms.ValidationError("Give at least one delay id.")
        return ids

    def payload(self) -> dict[str, Any]:
        return {"topic": self.cleaned_data["topic"], "ids": self.cleaned_data["ids"]}


class ProducerUpdateForm(ApplicationForm):
    kind = Kind.PRODUCER_UPDATE
    title = "Change a producer's blacklist, broker weights and rate limit"
    name = forms.ChoiceField(label="Producer")
    blacklist = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="IP addresses or networks refused, one per line.",
    )
    weights = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="broker=weight (0–10000), one per line; empty: equal weights.",
    )
    rate_limit = forms.IntegerField(
        min_value=1,
        max_value=1_000_000,
        required=False,
        label="Rate limit (messages/s)",
        help_text="Empty: no limit.",
    )

    def setup(self) -> None:
        self.choose("name", _producer_choices(self.user), "name")

    def clean_weights(self) -> dict[str, int]:
        weights = parse_weights(self.cleaned_data["weights"])
        producer = ProducerPolicy.objects.filter(name=self.data.get("name")).first()
        if producer and weights:
            known = {
                str(b)
                for b in Broker.objects.filter(cluster=producer.topic.cluster).values_list(
                    "id", flat=True
                )
            }
            unknown = sorted(set(weights) - known)
            if unknown:
                raise forms.ValidationError(
                    f"Not brokers of the topic's cluster: {', '.join(unknown)}."
                )
        return weights

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        changes = {
            "blacklist": parse_ip_lines(d["blacklist"]),
            "weights": d["weights"],
            "rate_limit": d["rate_limit"],
        }
        return {"name": d["name"], "changes": changes}


class ConsumerUpdateForm(ApplicationForm):
    kind = Kind.CONSUMER_UPDATE
    title = "Change a consumer's blacklist and alert rules"
    name = forms.ChoiceField(label="Consumer")
    blacklist = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="IP addresses or networks refused, one per line.",
    )
    backlog_alert_enabled = forms.BooleanField(required=False, label="Backlog alert on")
    backlog_alert_count = forms.IntegerField(
        min_value=1, initial=10_000, label="Alert at this many unconsumed messages"
    )
    backlog_alert_age_s = forms.IntegerField(
        min_value=1, initial=300, label="… when the oldest is older than (s)"
    )
    failure_alert_per_hour = forms.IntegerField(
        min_value=0,
        max_value=10_000_000,
        required=False,
        label="Alert at this many consume failures in an hour",
        help_text="Empty: the platform's default; 0: never. The alert switch above turns"
        " this alert off too.",
    )

    def setup(self) -> None:
        self.choose("name", _consumer_choices(self.user), "name")

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {
            "name": d["name"],
            "changes": {
                "blacklist": parse_ip_lines(d["blacklist"]),
                "backlog_alert_enabled": d["backlog_alert_enabled"],
                "backlog_alert_count": d["backlog_alert_count"],
                "backlog_alert_age_s": d["backlog_alert_age_s"],
                "failure_alert_per_hour": d["failure_alert_per_hour"],
            },
        }


class BecomeAdminForm(ApplicationForm):
    kind = Kind.BECOME_ADMIN
    title = "Become an admin"
    help = (
        "A team admin changes the team's apps and tokens; a platform admin decides"
        " applications and sees every team. A platform admin decides this application:"
        " it is never approved automatically."
    )
    admin_of = forms.ChoiceField(label="Admin of")

    def setup(self) -> None:
        member_of = (
            TeamMembership.objects.filter(user=self.user, role=TeamMembership.Role.MEMBER)
            .select_related("team")
            .order_by("team__name")
        )
        choices = [(f"team:{m.team.name}", f"the team {m.team.name}") for m in member_of]
        if not access.is_platform_admin(self.user):
            choices.append(("platform", "the platform"))
        self.fields["admin_of"].choices = choices

    def payload(self) -> dict[str, Any]:
        chosen = self.cleaned_data["admin_of"]
        if chosen == "platform":
            return {"platform": True}
        return {"team": chosen.removeprefix("team:")}


FORMS: dict[str, type[ApplicationForm]] = {
    f.kind: f
    for f in (
        TopicCreateForm,
        TopicUpdateForm,
        TopicDeleteForm,
        ProducerCreateForm,
        ProducerUpdateForm,
        ProducerDeleteForm,
        ConsumerCreateForm,
        ConsumerUpdateForm,
        ConsumerDeleteForm,
        PauseForm,
        ResumeForm,
        RateLimitForm,
        OffsetResetForm,
        SkipBacklogForm,
        ReconsumeForm,
        DeadLetterResendForm,
        RetrySkipForm,
        TimerCancelForm,
        ZbusOpenForm,
        ZbusCloseForm,
        TrafficRuleAddForm,
        TrafficRuleDeleteForm,
        MessageExportForm,
        BecomeAdminForm,
    )
}


def add_service_errors(form: forms.Form, detail: object) -> None:
    """Put a DRF ValidationError's detail on the form: per field where it names one."""
    if not isinstance(detail, dict):
        form.add_error(None, error_text(detail))
        return
    for key, value in detail.items():
        if key == "changes" and isinstance(value, dict):
            add_service_errors(form, value)
        elif key in form.fields and key != "kind":
            form.add_error(key, error_text(value))
        elif key in ("timestamp_ms",) and "timestamp" in form.fields:
            form.add_error("timestamp", error_text(value))
        else:
            label = "" if key in ("non_field_errors", "target") else f"{key}: "
            form.add_error(None, f"{label}{error_text(value)}")


def error_text(detail: object) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {error_text(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return " ".join(error_text(v) for v in detail)
    return str(detail)


def initial_for(kind: str, user: AbstractBaseUser, params: dict[str, str]) -> dict[str, Any]:
    """Initial form values from the query string; update forms start from the current
    policy so an editor shows what is in force."""
    initial: dict[str, Any] = {k: v for k, v in params.items() if k != "kind"}
    name = params.get("name", "")
    if kind == Kind.PRODUCER_UPDATE and name:
        producer = access.producers_for(user).filter(name=name).first()
        if producer is not None:
            initial["blacklist"] = "\n".join(producer.blacklist)
            initial["weights"] = "\n".join(f"{b}={w}" for b, w in producer.weights.items())
            initial["rate_limit"] = producer.rate_limit
    if kind == Kind.CONSUMER_UPDATE and name:
        consumer = access.consumers_for(user).filter(name=name).first()
        if consumer is not None:
            initial["blacklist"] = "\n".join(consumer.blacklist)
            initial["backlog_alert_enabled"] = consumer.backlog_alert_enabled
            initial["backlog_alert_count"] = consumer.backlog_alert_count
            initial["backlog_alert_age_s"] = consumer.backlog_alert_age_s
            initial["failure_alert_per_hour"] = consumer.failure_alert_per_hour
    return initial
