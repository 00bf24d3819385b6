"""Engine operations that approved applications run.

Long ones run by Celery with progress (offset resets, skipping backlog, re-consuming a time
span): an approved application starts the task and records its id; the task reports
per-partition progress (Celery ``PROGRESS`` state), which the API and the console's
progress bar read. Short ones (resending dead letters, cancelling timer messages) run as
the application executes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from celery import shared_task
from celery.result import AsyncResult

from mqcloud.engine_access import engine_session, run_in_session

if TYPE_CHECKING:
    from brokers.engine import Engine

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


def partition_by_partition(
    task: Any,
    parts: Callable[[Engine], list[int]],
    step: Callable[[Engine, int], Awaitable[int]],
    key: str,
) -> dict[str, Any]:
    """Run ``step(engine, partition)`` for each of ``parts(engine)``, reporting progress
    as Celery ``PROGRESS`` state (``done``, ``total`` and each partition's outcome under
    ``key``), which the API and the console's progress bar read."""
    task_id = task.request.id  # the request context does not follow into async_to_sync

    async def run() -> tuple[dict[str, int], int]:
        async with engine_session() as engine:
            todo = parts(engine)
            done: dict[str, int] = {}
            for n, p in enumerate(todo):
                done[str(p)] = await step(engine, p)
                task.update_state(
                    task_id=task_id,
                    state="PROGRESS",
                    meta={"done": n + 1, "total": len(todo), key: done},
                )
            return done, len(todo)

    outcome, total = async_to_sync(run)()
    return {"done": len(outcome), "total": total, key: outcome}


@shared_task(bind=True)
def reset_offsets(self, topic: str, app: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Reset one consumer's ack index partition by partition, reporting progress."""
    if spec["position"] == "timestamp":
        kwargs: dict[str, Any] = {"timestamp_ms": spec["timestamp_ms"]}
    elif spec["position"] == "index":
        kwargs = {"position": spec["index"]}
    else:
        kwargs = {"position": spec["position"]}

    def parts(engine: Engine) -> list[int]:
        if spec.get("partition") is not None:
            return [spec["partition"]]
        return list(range(engine.topic(topic).partitions))

    async def reset(engine: Engine, p: int) -> int:
        result = await engine.reset_offsets(
            topic, app, partition=p, client_id=spec.get("client_id"), **kwargs
        )
        return result[p]

    return partition_by_partition(self, parts, reset, "positions")


def start_reconsume(
    topic: str, app: str, from_ms: int, to_ms: int, client_id: str | None = None
) -> dict:
    """Take the spans to copy and whom for now (a span too large fails the application
    with nothing copied), then queue the copying; the application's result keeps the
    task id."""

    async def plan_of(engine: Engine) -> tuple[list[str | None], dict[int, tuple[int, int]]]:
        clients = await engine.reconsumers(topic, app, client_id)
        spans = await engine.reconsume_spans(
            topic, app, from_ms=from_ms, to_ms=to_ms, clients=len(clients)
        )
        return clients, spans

    clients, found = run_in_session(plan_of)
    plan = {str(p): list(span) for p, span in sorted(found.items())}
    task = reconsume.delay(topic, app, plan, clients)
    return {
        "task_id": task.id,
        "operation": "reconsume",
        "messages": sum(end - first for first, end in found.values()),
        "spans": plan,
        "clients": clients,
    }


@shared_task(bind=True)
def reconsume(
    self,
    topic: str,
    app: str,
    plan: dict[str, list[int]],
    clients: list[str | None] | None = None,
) -> dict[str, Any]:
    """Copy each partition's span into the retry store of the consumer (of each of its
    broadcast ``clients``), reporting progress."""

    async def copy(engine: Engine, p: int) -> int:
        first, end = plan[str(p)]
        copied = 0
        for client in clients or [None]:
            copied += await engine.reconsume(topic, app, p, first, end, client_id=client)
        return copied

    return partition_by_partition(self, lambda _: [int(p) for p in plan], copy, "copied")


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


def skip_retries_before(
    topic: str, app: str, before_ms: int, business_id: str | None, client_id: str | None
) -> int:
    """Delete a consumer's retries that came into its store before ``before_ms`` (of
    ``business_id``'s messages only, when given; ``client_id``'s own when given, else the
    group's and every client's)."""
    return run_in_session(
        lambda engine: engine.skip_retries_before(
            topic, app, before_ms, business_id=business_id, client_id=client_id
        )
    )


def cancel_delayed(topic: str, ids: list[int]) -> list[int]:
    """Cancel held delayed or timer messages of ``topic``; the ids that were still held."""
    return run_in_session(lambda engine: engine.cancel_delayed(topic, ids))
