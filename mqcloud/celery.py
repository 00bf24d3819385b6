"""The Celery application: operations, alerts, liveness and other scheduled work."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")

app = Celery("mqcloud")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["mqcloud"])
app.conf.imports = ("mqcloud.tasks", "mqcloud.operations", "mqcloud.exports", "pipeline.tasks")
