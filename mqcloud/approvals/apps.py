"""Django app configuration of applications and approvals."""

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "mqcloud.approvals"
    label = "approvals"
    verbose_name = "Applications and approvals"
