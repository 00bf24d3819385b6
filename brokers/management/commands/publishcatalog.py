"""``manage.py publishcatalog``: publish the catalog snapshot to Redis now."""

from django.core.management.base import BaseCommand

from brokers.catalog_loader import publish


class Command(BaseCommand):
    help = "Build the catalog snapshot and publish it to Redis."

    def handle(self, *args: object, **options: object) -> None:
        snapshot = publish()
        self.stdout.write(
            f"catalog v{snapshot.version}: {len(snapshot.topics)} topics,"
            f" {len(snapshot.brokers)} brokers, {len(snapshot.apps)} apps"
        )
