"""createQueue / deleteQueue in the catalog (PostgreSQL), for the async servers.

A queue is a topic with one partition whose VibeMQ settings are the queue options, owned
by the creating app's team; the creating app gets a producer and a consumer policy on it
(and on its DLQ), so it may publish and subscribe — others only once they have policies
of their own (vibemq.md §14). A connection without an app token creates queues in the
``vibemq-anonymous`` team, open to that team's anonymous app. The ORM runs in a thread
(``sync_to_async``); the model signals publish the change as a catalog delta when the
transaction commits, and the caller then refreshes its watcher so
the next command already sees the change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db import connection as db_connection
from django.db.models import ProtectedError

from brokers.anonymous import anonymous_app
from brokers.engine import PRIORITY_BANDS, PRIORITY_MODE
from brokers.models import App, Broker, Cluster, ConsumerPolicy, ProducerPolicy, Team, Topic
from brokers.topology import create_partition_groups

ANONYMOUS_TEAM = "vibemq-anonymous"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """What a new queue's topic row holds."""

    code: str
    team: str
    app: str = ""
    """The creating app, which gets both policies ("": the team's anonymous app)."""
    delivery_mode: str = "RoundRobin"
    max_queue_size: int = 10_000
    overflow_policy: str = "DropOldest"
    message_ttl_ms: int | None = None
    dead_letter_enabled: bool = False
    max_retry_attempts: int = 3
    dead_letter_queue: str = ""
    """A deadLetterQueueName other than ``<code>.dlq`` ("": the default)."""
    creator: str = ""


class CatalogRefused(Exception):
    """The catalog cannot hold the queue (no cluster or writable broker, protected rows)."""


def _cluster(broker_id: int | None) -> Cluster:
    if broker_id is not None:
        broker = Broker.objects.select_related("cluster").filter(id=broker_id).first()
        if broker is not None:
            return broker.cluster
    cluster = Cluster.objects.order_by("id").first()
    if cluster is None:
        raise CatalogRefused("the catalog has no cluster")
    return cluster


def _team(name: str) -> Team:
    if name:
        team = Team.objects.filter(name=name).first()
        if team is not None:
            return team
    team, _ = Team.objects.get_or_create(
        name=ANONYMOUS_TEAM, defaults={"description": "Queues created by anonymous VibeMQ"}
    )
    return team


def _grant(topic: Topic, app: App) -> None:
    """A producer and a consumer policy of ``app`` on ``topic`` (from the earliest
    message: a queue keeps what was published before its first subscriber)."""
    ProducerPolicy.objects.get_or_create(
        topic=topic, app=app, defaults={"name": ProducerPolicy.default_name(app, topic)}
    )
    ConsumerPolicy.objects.get_or_create(
        topic=topic,
        app=app,
        defaults={
            "name": ConsumerPolicy.default_name(app, topic),
            "start_position": "earliest",
        },
    )


def _creator_app(spec: QueueSpec, team: Team) -> App:
    if spec.app:
        app = App.objects.filter(code=spec.app).first()
        if app is not None:
            return app
    return anonymous_app(team)


def _create_row(spec: QueueSpec, cluster: Cluster, team: Team) -> bool:
    if Topic.objects.filter(code=spec.code).exists():
        return False
    try:
        with transaction.atomic():
            topic = Topic.objects.create(
                code=spec.code,
                cluster=cluster,
                team=team,
                partitions=PRIORITY_BANDS if spec.delivery_mode == PRIORITY_MODE else 1,
                delivery_mode=spec.delivery_mode,
                max_queue_size=spec.max_queue_size,
                overflow_policy=spec.overflow_policy,
                message_ttl_ms=spec.message_ttl_ms,
                dead_letter_enabled=spec.dead_letter_enabled,
                max_retry_attempts=spec.max_retry_attempts,
                dead_letter_queue=spec.dead_letter_queue,
                creator=spec.creator,
            )
            create_partition_groups(topic, 1)
            _grant(topic, _creator_app(spec, team))
    except IntegrityError:  # created concurrently by another connection or process
        return False
    return True


def _create_queue(spec: QueueSpec, dead_letter_queue: str | None, broker_id: int | None) -> bool:
    try:
        with transaction.atomic():
            cluster, team = _cluster(broker_id), _team(spec.team)
            created = _create_row(spec, cluster, team)
            if created and dead_letter_queue is not None:
                dlq = QueueSpec(
                    code=dead_letter_queue, team=spec.team, app=spec.app, creator=spec.creator
                )
                _create_row(dlq, cluster, team)
            return created
    except ValidationError as exc:
        raise CatalogRefused("; ".join(exc.messages)) from None


def _delete_queue(code: str) -> bool:
    with transaction.atomic():
        topic = Topic.objects.filter(code=code).first()
        if topic is None:
            return False
        try:
            topic.delete()
        except ProtectedError as exc:
            raise CatalogRefused(f"queue {code} is still referenced") from exc
        return True


def _closing(fn: Callable[..., T]) -> Callable[..., T]:
    """Run ``fn`` and close the thread's database connection (catalog writes are rare;
    a pool thread must not keep a connection open)."""

    def run(*args: object) -> T:
        try:
            return fn(*args)
        finally:
            db_connection.close()

    return run


async def create_queue(
    spec: QueueSpec, dead_letter_queue: str | None, broker_id: int | None
) -> bool:
    """Create the queue (and its DLQ, if named and missing); False if it already existed."""
    return await sync_to_async(_closing(_create_queue), thread_sensitive=False)(
        spec, dead_letter_queue, broker_id
    )


async def delete_queue(code: str) -> bool:
    """Delete the queue's topic row; False if there was none."""
    return await sync_to_async(_closing(_delete_queue), thread_sensitive=False)(code)
