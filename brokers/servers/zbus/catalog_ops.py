"""``create_mq`` in the catalog: the only database access of the zbus server.

Runs the ORM in a worker thread (``sync_to_async``); the model signals publish the change
as a catalog delta when the transaction commits, and this server then refreshes its watcher
so the new MQ is usable at once; other brokers pick it up within a second.
A new MQ is a one-partition topic led by this broker, in the broker's cluster, owned by the
``zbus`` team, unbounded as zbus 5's queues were (its retention applies).
It is open to token-less clients, as zbus 5 MQs were (zbus.md §13.3a): the ``zbus`` team's
anonymous app gets its producer and consumer policies; an access token, when given,
still guards it.
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from brokers.anonymous import open_topic
from brokers.models import Broker, PartitionGroup, Team, Topic

ZBUS_TEAM = "zbus"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What ``create_mq`` found or did."""

    created: bool
    mode: int
    invalid: str = ""
    """Non-empty when the catalog refused the name (its own naming rule)."""


def _create(name: str, mode: int, token: str, creator: str, broker_id: int) -> Outcome:
    existing = Topic.objects.filter(code=name).values_list("zbus_mode", flat=True).first()
    if existing is not None:
        return Outcome(False, existing)
    broker = Broker.objects.get(id=broker_id)
    try:
        with transaction.atomic():
            team, _ = Team.objects.get_or_create(name=ZBUS_TEAM)
            topic = Topic(
                code=name,
                cluster=broker.cluster,
                team=team,
                partitions=1,
                zbus_mode=mode,
                creator=creator[:255],
                description="created over zbus",
            )
            topic.set_zbus_token(token)
            topic.full_clean()
            topic.save()
            PartitionGroup.objects.create(topic=topic, group_id=0, leader=broker, partitions=[0])
            open_topic(topic)
    except ValidationError as exc:
        if "code" in getattr(exc, "error_dict", {}) and Topic.objects.filter(code=name).exists():
            return _create(name, mode, token, creator, broker_id)
        return Outcome(False, mode, invalid="; ".join(exc.messages))
    except IntegrityError:  # created concurrently by another broker
        existing = Topic.objects.filter(code=name).values_list("zbus_mode", flat=True).first()
        return Outcome(False, existing if existing is not None else mode)
    return Outcome(True, mode)


def _create_and_close(name: str, mode: int, token: str, creator: str, broker_id: int) -> Outcome:
    try:
        return _create(name, mode, token, creator, broker_id)
    finally:
        connection.close()  # create_mq is rare: no idle connection left in the worker thread


create_topic = sync_to_async(_create_and_close, thread_sensitive=False)
"""``await create_topic(name, mode, token, creator, broker_id)`` → :class:`Outcome`."""
