"""Running engine calls from synchronous (Django) tests over the test database's catalog."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from brokers.catalog_loader import build_snapshot
from brokers.engine import Engine
from brokers.engine_run import run_on_engine


def engine_call(fn: Callable[[Engine], Awaitable[Any]]) -> Any:
    """Run ``fn(engine)`` on an engine over the current catalog (from the test database),
    as the catalog's own synchronous code does (:func:`brokers.engine_run.run_on_engine`)."""
    return run_on_engine(build_snapshot(), fn)
