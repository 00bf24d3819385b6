"""Celery tasks: broker liveness, the catalog safety-net republish, delayed messages."""

from __future__ import annotations

from datetime import timedelta

from asgiref.sync import async_to_sync
from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from brokers.catalog_loader import publish, publish_on_commit
from brokers.models import Broker
from mqcloud.engine_access import engine_session


@shared_task
def mark_silent_brokers_down() -> list[int]:
    """Mark brokers whose heartbeat is older than BROKER_DEAD_AFTER_SECONDS as down."""
    cutoff = timezone.now() - timedelta(seconds=settings.BROKER_DEAD_AFTER_SECONDS)
    with transaction.atomic():
        silent = list(
            Broker.objects.select_for_update()
            .filter(status=Broker.Status.UP, last_heartbeat__lt=cutoff)
            .values_list("id", flat=True)
        )
        if silent:
            Broker.objects.filter(id__in=silent).update(status=Broker.Status.DOWN)
            publish_on_commit()
    return silent


@shared_task
def republish_catalog() -> int:
    """Publish the catalog snapshot again (covers a publish lost to a Redis outage)."""
    return publish().version


async def _release_delayed() -> int:
    async with engine_session() as engine:
        return await engine.release_all_delayed()


@shared_task
def release_delayed_messages() -> int:
    """Append the delayed and timer messages that are due (beat runs it every second)."""
    return async_to_sync(_release_delayed)()
