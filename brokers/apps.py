"""Django app configuration of the broker catalog."""

from django.apps import AppConfig


class BrokersConfig(AppConfig):
    """The catalog app; connects the signals that publish catalog snapshots."""

    name = "brokers"
    verbose_name = "Broker catalog"

    def ready(self) -> None:
        from brokers import signals  # noqa: F401  (connects receivers)
