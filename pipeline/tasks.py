"""Celery task of the pipeline: the per-minute rollup, scheduled by beat.

The job runs in its own process (``manage.py pipeline rollup``) so the worker never
hosts a JVM; a Redis lock keeps two rollups from running at once.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import redis
from celery import shared_task
from django.conf import settings

from pipeline.session import PROJECT_ROOT

LOCK_KEY = "mqcloud:{pipeline}:rollup:lock"
TIMEOUT_S = 600


@shared_task(name="pipeline.tasks.rollup", ignore_result=True)
def rollup(window_minutes: int = 10) -> int | None:
    """Run the rollup job unless one is running; its exit code (None when skipped)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    token = uuid.uuid4().hex
    try:
        if not client.set(LOCK_KEY, token, nx=True, ex=TIMEOUT_S):
            return None
        done = subprocess.run(
            [sys.executable, "manage.py", "pipeline", "rollup", "--window", str(window_minutes)],
            cwd=PROJECT_ROOT,
            timeout=TIMEOUT_S,
            check=False,
        )
        return done.returncode
    finally:
        if client.get(LOCK_KEY) == token.encode():
            client.delete(LOCK_KEY)
        client.close()
