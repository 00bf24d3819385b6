"""Django app configuration of the console."""

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "mqcloud.console"
    label = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from mqcloud.console import lockouts  # noqa: F401  (audit receivers of failed logins)
