"""Django app configuration of alerts."""

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "mqcloud.alerts"
    label = "alerts"
    verbose_name = "Alerts"
