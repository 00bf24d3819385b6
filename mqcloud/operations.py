"""Engine operations that approved applications run.

Long ones run by Celery with progress (offset resets and skipping backlog): an approved
application starts the task and records its id; the task reports per-partition progress
(Celery ``PROGRESS`` state), which the API and the console's progress bar read. Short ones
(resending dead letters, cancelling timer messages) run as the application executes.
"""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import async_to_sync
from celery import shared_task
from celery.result import AsyncResult

from mqcloud.engine_access import engine_session, run_in_session

SKIP_BACKLOG_MS = 60_000  # "skip backlog" is a reset to now − 60 s


def start_offset_reset(topic: str, app: str, spec: dict[str, Any], *, skip_backlog: bool) -> dict:
    """Queue the reset; the application's result keeps the task id."""
    if skip_backlog:
        spec = {
            **spec,
            "position": "timestamp",
            "timestamp_ms": int(time.time() * 1000) - SKIP_BACKLOG_MS,
        }
    task = reset_offsets.delay(topic, app, spec)
    return {"task_id": task.id, "operation": "offset_reset", "spec": spec}


@shared_task(bind=True)
def reset_offsets(self, topic: str, app: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Reset one consumer's ack index partition by partition, reporting progress."""
    task_id = self.request.id  # the request context does not follow into async_to_sync

    async def run() -> dict[str, int]:
        async with engine_session() as engine:
            info = engine.topic(topic)
            parts = (
                [spec["partition"]]
                if spec.get("partition") is not None
                else list(range(info.partitions))
            )
            done: dict[str, int] = {}
            for n, p in enumerate(parts):
                if spec["position"] == "timestamp":
                    kwargs: dict[str, Any] = {"timestamp_ms": spec["timestamp_ms"]}
                elif spec["position"] == "index":
                    kwargs = {"position": spec["index"]}
                else:
                    kwargs = {"position": spec["position"]}
                result = await engine.reset_offsets(
                    topic, app, partition=p, client_id=spec.get("client_id"), **kwargs
                )
                done[str(p)] = result[p]
                self.update_state(
                    task_id=task_id,
                    state="PROGRESS",
                    meta={"done": n + 1, "total": len(parts), "positions": done},
                )
            return done

    positions = async_to_sync(run)()
    return {"done": len(positions), "total": len(positions), "positions": positions}


def progress(task_id: str) -> dict[str, Any]:
    """State of an operation: PENDING, PROGRESS (done/total), SUCCESS or FAILURE."""
    result = AsyncResult(task_id)
    info: dict[str, Any] = {"task_id": task_id, "state": result.state}
    if result.state in ("PROGRESS", "SUCCESS") and isinstance(result.info, dict):
        info.update(result.info)
    elif result.state == "FAILURE":
        info["error"] = str(result.info)
    return info


RUNNING_STATES = ("RECEIVED", "STARTED", "PROGRESS", "RETRY")


def task_running(task_id: str) -> bool:
    """Whether a worker reports the task as running (PENDING means unknown to Celery)."""
    return AsyncResult(task_id).state in RUNNING_STATES


def resend_dead_letters(topic: str, app: str, ids: list[int]) -> int:
    """Move dead letters (all when ``ids`` is empty) back to the retry store, due now."""
    return run_in_session(lambda engine: engine.resend_dead_letters(topic, app, ids))


def cancel_delayed(topic: str, ids: list[int]) -> list[int]:
    """Cancel held delayed or timer messages of ``topic``; the ids that were still held."""
    return run_in_session(lambda engine: engine.cancel_delayed(topic, ids))
