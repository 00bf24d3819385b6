"""mqcloud: the Django project and the console of the message-queue platform."""

from mqcloud.celery import app as celery_app

__all__ = ["celery_app"]
