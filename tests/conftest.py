"""Fixtures available to every test suite."""

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
