"""Publish a new catalog snapshot whenever a catalog row changes."""

from __future__ import annotations

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from brokers.catalog_loader import publish_on_commit
from brokers.consumer_start import pin_start_on_commit
from brokers.models import (
    App,
    AppToken,
    Broker,
    ConsumerPolicy,
    PartitionGroup,
    ProducerPolicy,
    Team,
    Topic,
)

CATALOG_MODELS = (
    Broker,
    Topic,
    PartitionGroup,
    App,
    AppToken,
    ProducerPolicy,
    ConsumerPolicy,
    Team,
)


@receiver([post_save, post_delete])
def catalog_changed(sender: type, **kwargs: object) -> None:
    """Any saved or deleted catalog row makes the snapshot stale."""
    if sender in CATALOG_MODELS:
        publish_on_commit()


@receiver(post_save, sender=ConsumerPolicy)
def consumer_created(sender: type, instance: ConsumerPolicy, created: bool, **kwargs: object):
    """A new clustering consumer's start position is pinned when its transaction commits
    (with every other consumer created in it, in one batch)."""
    if created and instance.mode == ConsumerPolicy.Mode.CLUSTERING:
        pin_start_on_commit(instance.pk)
