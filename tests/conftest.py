"""Fixtures available to every test suite."""

from collections.abc import Iterator

import pytest

from tests.mail_backends import smtp_down
from tests.redis_fixtures import redis_client, redis_url, require_test_session

__all__ = ["redis_client", "redis_url", "smtp_down"]


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """Database tests need the PostgreSQL of scripts/test_session.py."""
    require_test_session()


@pytest.fixture(autouse=True)
def fast_password_hashing(request: pytest.FixtureRequest) -> None:
    """Production hashing is deliberately slow; tests only need it to be a real hash."""
    if request.config.pluginmanager.has_plugin("django"):
        settings = request.getfixturevalue("settings")
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def close_connections_of_async_orm_calls(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a database test, close the database connections that its ``sync_to_async``
    ORM calls opened in asgiref's one worker thread (an async test has no sync thread of
    its own to run them in). Left open, a later test without database access that runs a
    Channels consumer trips over one: the consumer checks old connections in that thread
    and pytest-django refuses the check."""
    yield
    if request.node.get_closest_marker("django_db") is None and not (
        {"db", "transactional_db"} & set(request.fixturenames)
    ):
        return
    from asgiref.sync import SyncToAsync
    from django.db import connections

    SyncToAsync.single_thread_executor.submit(connections.close_all).result()
