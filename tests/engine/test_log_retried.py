"""How background tasks log Redis work they will retry: one line per outage, a traceback
for anything unexpected (``brokers.engine.reconnect.log_retried``)."""

from __future__ import annotations

import logging

from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError

from brokers.engine.reconnect import log_retried

log = logging.getLogger("tests.log_retried")


def test_redis_down_or_loading_is_one_line_naming_the_error(caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger=log.name):
        log_retried(log, RedisConnectionError("Connection refused."), "inbox %s lost", "zbus")
        log_retried(log, BusyLoadingError("Redis is loading"), "flush failed")
    first, second = caplog.records
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert first.getMessage() == "inbox zbus lost (Connection refused.)"
    assert second.getMessage() == "flush failed (Redis is loading)" and second.exc_info is None


def test_anything_else_keeps_its_traceback_at_the_level_asked(caplog) -> None:
    bug = ValueError("a bug")
    with caplog.at_level(logging.DEBUG, logger=log.name):
        log_retried(log, bug, "watcher lost Redis", unexpected=logging.ERROR)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.getMessage() == "watcher lost Redis"
    assert record.exc_info is not None and record.exc_info[1] is bug
