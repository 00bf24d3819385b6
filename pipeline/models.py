"""Tables the pipeline writes: job runs, per-minute traffic, consumer lag history and the
console's archive searches.

The console reads them for its charts and the pipeline page; rollups keep 30 days.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from brokers.topic_codes import STORED_TOPIC_MAX

RETENTION_DAYS = 30


class JobRun(models.Model):
    """One run of a pipeline job (a continuous archive run is updated after every batch)."""

    class Job(models.TextChoices):
        ARCHIVE = "archive", "Archive"
        ROLLUP = "rollup", "Rollup"
        TRACE = "trace", "Trace"

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        OK = "ok", "OK"
        FAILED = "failed", "Failed"

    job = models.CharField(max_length=16, choices=Job.choices)
    started = models.DateTimeField()
    finished = models.DateTimeField(null=True, blank=True)
    rows = models.BigIntegerField(default=0, help_text="Rows written (or found, for a trace).")
    lag = models.BigIntegerField(
        null=True, blank=True, help_text="Messages not yet processed when the run last reported."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["-started", "-id"]
        indexes = [models.Index(fields=["job", "-started"], name="pipeline_run_job_started")]

    def __str__(self) -> str:
        return f"{self.job} {self.started:%Y-%m-%d %H:%M:%S} {self.status}"

    @classmethod
    def last(cls, job: str) -> JobRun | None:
        """The most recent run of ``job``."""
        return cls.objects.filter(job=job).first()


class TrafficMinute(models.Model):
    """Traffic of one topic, app or broker in one minute (by store time)."""

    class Dimension(models.TextChoices):
        TOPIC = "topic", "Topic"
        APP = "app", "App"
        BROKER = "broker", "Broker"

    dimension = models.CharField(max_length=8, choices=Dimension.choices)
    name = models.CharField(max_length=STORED_TOPIC_MAX)  # topic, app or broker
    minute = models.DateTimeField()
    messages = models.BigIntegerField()
    bytes = models.BigIntegerField(help_text="Sum of message body sizes.")
    latency_p50_ms = models.BigIntegerField(help_text="Produce→store latency, median.")
    latency_p99_ms = models.BigIntegerField(help_text="Produce→store latency, 99th percentile.")

    class Meta:
        ordering = ["dimension", "name", "minute"]
        constraints = [
            models.UniqueConstraint(
                fields=["dimension", "name", "minute"], name="pipeline_traffic_once_per_minute"
            )
        ]
        indexes = [
            models.Index(fields=["minute"], name="pipeline_traffic_minute"),
            # the dashboard's top topics: one dimension's last minutes, summed per name
            # from the index alone
            models.Index(
                fields=["dimension", "minute"],
                include=["name", "messages", "bytes"],
                name="pipeline_traffic_dim_minute",
            ),
        ]


class ConsumerLag(models.Model):
    """Backlog of one consumer (app) on one topic, sampled once a minute."""

    topic = models.CharField(max_length=STORED_TOPIC_MAX)
    app = models.CharField(max_length=200)
    minute = models.DateTimeField()
    lag = models.BigIntegerField()

    class Meta:
        ordering = ["topic", "app", "minute"]
        constraints = [
            models.UniqueConstraint(
                fields=["topic", "app", "minute"], name="pipeline_lag_once_per_minute"
            )
        ]
        indexes = [models.Index(fields=["minute"], name="pipeline_lag_minute")]


TRACE_LIMIT = 1000
TRACE_BODY_BYTES = 4096
TRACE_KEEP_DAYS = 7


class TraceSearch(models.Model):
    """A message trace the console asked for: a Celery task runs ``pipeline trace`` in a
    subprocess and stores the rows it found here (at most :data:`TRACE_LIMIT`, bodies cut
    to :data:`TRACE_BODY_BYTES`)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for a worker"
        RUNNING = "running", "Running"
        OK = "ok", "OK"
        FAILED = "failed", "Failed"

    topic = models.CharField(max_length=STORED_TOPIC_MAX)
    business_id = models.CharField(max_length=200)
    start = models.DateTimeField(null=True, blank=True)
    end = models.DateTimeField(null=True, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(default=timezone.now)
    finished = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    rows = models.JSONField(default=list, blank=True, help_text="Rows of `pipeline trace --json`.")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["created"], name="pipeline_trace_created")]

    def __str__(self) -> str:
        return f"trace {self.topic} businessId={self.business_id} {self.status}"

    @property
    def done(self) -> bool:
        return self.status in (self.Status.OK, self.Status.FAILED)
