"""``create_mq`` in the catalog: the only database access of the zbus server.

Runs the ORM in a worker thread (``sync_to_async``); the model signals publish the change
as a catalog delta when the transaction commits, and this server then refreshes its watcher
so the new MQ is usable at once; other brokers pick it up within a second.
A new MQ is a one-partition topic led by this broker, in the broker's cluster, owned by the
``zbus`` team, unbounded as zbus 5's queues were (its retention applies).
It is open to token-less clients, as zbus 5 MQs were (zbus.md §13.3a): the ``zbus`` team's
anonymous app gets its producer and consumer policies; an access token, when given,
still guards it. An MQ name that cannot be a topic code (``order:created``, ``订单``) gets
the code :func:`~brokers.topic_codes.code_for_name` derives and keeps its name as the
topic's ``zbus_name``: other protocols and the console use the code.
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from brokers.anonymous import open_topic
from brokers.models import Broker, PartitionGroup, Team, Topic
from brokers.topic_codes import code_for_name

ZBUS_TEAM = "zbus"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What ``create_mq`` found or did."""

    created: bool
    mode: int
    invalid: str = ""
    """Non-empty when the catalog refused the name (its own naming rule)."""


def _existing_mode(name: str) -> int | None:
    """The zbus mode of the topic a zbus client calls ``name``, if there is one."""
    found = Topic.objects.filter(Q(code=name) | Q(zbus_name=name)).values_list("zbus_mode")
    row = found.first()
    return None if row is None else row[0]


def _create(name: str, mode: int, token: str, creator: str, broker_id: int) -> Outcome:
    existing = _existing_mode(name)
    if existing is not None:
        return Outcome(False, existing)
    code = code_for_name(name)
    broker = Broker.objects.get(id=broker_id)
    try:
        with transaction.atomic():
            team, _ = Team.objects.get_or_create(name=ZBUS_TEAM)
            topic = Topic(
                code=code,
                zbus_name=None if code == name else name,
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
        if {"code", "zbus_name"} & set(getattr(exc, "error_dict", {})) and _existing_mode(
            name
        ) is not None:
            return _create(name, mode, token, creator, broker_id)
        return Outcome(False, mode, invalid="; ".join(exc.messages))
    except IntegrityError:  # created concurrently by another broker
        existing = _existing_mode(name)
        return Outcome(False, existing if existing is not None else mode)
    return Outcome(True, mode)


def _create_and_close(name: str, mode: int, token: str, creator: str, broker_id: int) -> Outcome:
    try:
        return _create(name, mode, token, creator, broker_id)
    finally:
        connection.close()  # create_mq is rare: no idle connection left in the worker thread


create_topic = sync_to_async(_create_and_close, thread_sensitive=False)
"""``await create_topic(name, mode, token, creator, broker_id)`` → :class:`Outcome`."""
