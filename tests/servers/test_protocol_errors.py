"""Protocol errors are all counted and logged by sample (issue 20 item 7)."""

from __future__ import annotations

import logging

import pytest

from brokers.protocols.vibemq import InvalidMessage, InvalidQueue, decode_json
from brokers.servers.protocol_errors import ProtocolErrors


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_every_error_is_counted_and_at_most_a_burst_per_window_logged(caplog):
    clock = Clock()
    errors = ProtocolErrors(burst=3, window=60, clock=clock)
    log = logging.getLogger("test.protocol_errors")
    with caplog.at_level(logging.INFO, logger="test.protocol_errors"):
        for i in range(1000):
            errors.record(log, "jmq4", "malformed", "bad frame %d", i)
        errors.record(log, "zbus", "bad_request", "bad request")
        assert len(caplog.records) == 4  # 3 of jmq4, 1 of zbus
        clock.now = 61
        errors.record(log, "jmq4", "malformed", "bad frame again")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[-2] == "jmq4: 997 more protocol errors were not logged (3 logged per 60 s)"
    assert lines[-1] == "bad frame again"
    assert errors.snapshot() == {"jmq4": {"malformed": 1001}, "zbus": {"bad_request": 1}}


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        (b'{"id":"h","type":"ping","headers":{"a":%s}}', InvalidMessage),
        (b'{"id":"h","type":"ping","headers":%s}', InvalidMessage),
        (b'{"id":"h","type":"publish","queue":%s}', InvalidQueue),
        (b'{"id":%s,"type":"ping"}', InvalidMessage),
    ],
)
def test_vibemq_fields_too_large_to_be_valid_are_refused_without_decoding(frame, error):
    """A field of 300 KB of nested arrays is refused as the field's own error (the frame
    goes on being served), not decoded into 100,000 lists."""
    wide = b"[" + b"[]," * 100_000 + b"[]]"
    with pytest.raises(error):
        decode_json(frame % wide)
