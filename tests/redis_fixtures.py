"""Redis fixtures shared by the suites: a clean database on the session's real Redis."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

NO_SESSION = (
    "run the tests with `make test` (or `python scripts/test_session.py [pytest args]`),"
    " which starts PostgreSQL and Redis for the session"
)


def require_test_session() -> None:
    """Fail clearly when the session's PostgreSQL and Redis were not started."""
    if not os.environ.get("MQCLOUD_TEST_SESSION"):
        pytest.fail(NO_SESSION, pytrace=False)


@pytest.fixture
def redis_url() -> str:
    """URL of the Redis started for this test session."""
    require_test_session()
    return os.environ["REDIS_URL"]


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """An asyncio client on a flushed Redis; closed after the test."""
    client = aioredis.from_url(redis_url)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()
