"""Tables the pipeline writes: job runs, per-minute traffic and consumer lag history.

The console reads them for its charts and the pipeline page; rollups keep 30 days.
"""

from __future__ import annotations

from django.db import models

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
    name = models.CharField(max_length=200)
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
        indexes = [models.Index(fields=["minute"], name="pipeline_traffic_minute")]


class ConsumerLag(models.Model):
    """Backlog of one consumer (app) on one topic, sampled once a minute."""

    topic = models.CharField(max_length=200)
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
