"""Django app of the data pipeline: its run log, rollup tables and management command."""

from django.apps import AppConfig


class PipelineConfig(AppConfig):
    name = "pipeline"
    verbose_name = "Data pipeline"
    default_auto_field = "django.db.models.BigAutoField"
