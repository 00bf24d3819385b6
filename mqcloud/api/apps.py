"""Django app configuration of the REST API."""

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "mqcloud.api"
    label = "api"
    verbose_name = "REST API"
