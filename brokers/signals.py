"""Record every saved or deleted catalog row, so its transaction publishes it as a delta."""

from __future__ import annotations

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from brokers.catalog_loader import changed_on_commit
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


def _changed(instance: object) -> None:
    if isinstance(instance, Topic):
        changed_on_commit(topics=[instance.code])
    elif isinstance(instance, PartitionGroup):
        changed_on_commit(topic_ids=[instance.topic_id])
    elif isinstance(instance, ProducerPolicy):
        changed_on_commit(producers=[instance.name], topic_ids=[instance.topic_id])
    elif isinstance(instance, ConsumerPolicy):
        changed_on_commit(consumers=[instance.name], topic_ids=[instance.topic_id])
    elif isinstance(instance, App):
        changed_on_commit(apps=[instance.code])
        if instance.is_anonymous:  # its team's topics name it
            changed_on_commit(teams=[instance.team_id])
    elif isinstance(instance, AppToken):
        changed_on_commit(app_ids=[instance.app_id])
    elif isinstance(instance, Broker):
        changed_on_commit(brokers=[instance.id])
    elif isinstance(instance, Team):
        changed_on_commit(teams=[instance.id])


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
def catalog_changed(sender: type, instance: object, **kwargs: object) -> None:
    """A saved or deleted catalog row goes out in its transaction's delta."""
    if sender in CATALOG_MODELS:
        _changed(instance)


@receiver(post_save, sender=ConsumerPolicy)
def consumer_created(sender: type, instance: ConsumerPolicy, created: bool, **kwargs: object):
    """A new clustering consumer's start position is pinned when its transaction commits
    (with every other consumer created in it, in one batch)."""
    if created and instance.mode == ConsumerPolicy.Mode.CLUSTERING:
        pin_start_on_commit(instance.pk)
