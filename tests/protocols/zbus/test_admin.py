"""The create_mq body and MQ names (zbus.md §7, §11.2), and the protocol vocabulary."""

from __future__ import annotations

import pytest

from brokers.protocols.zbus import (
    BROKER_COMMANDS,
    REPLY_QUEUE_MODE,
    TRACKER_COMMANDS,
    Command,
    CreateMq,
    CreateMqError,
    MqMode,
    SubCommand,
    is_valid_mq_name,
    parse_create_mq,
)
from brokers.protocols.zbus.constants import BROKER_PORT, TRACKER_HA_PORT, TRACKER_PORT


def test_create_mq_with_string_mode() -> None:
    body = b'{"mqName": "MyMQ", "accessToken": "t", "mqMode": "1"}'
    assert parse_create_mq(body) == CreateMq(name="MyMQ", access_token="t", mode=MqMode.MQ)


def test_create_mq_with_numeric_mode_and_no_token() -> None:
    parsed = parse_create_mq(b'{"mqName": "news", "mqMode": 6}')
    assert parsed.mode == MqMode.PUBSUB | MqMode.TEMP
    assert parsed.access_token == ""


def test_create_mq_without_mode_is_a_queue() -> None:
    assert parse_create_mq(b'{"mqName": "q"}').mode == MqMode(0)


@pytest.mark.parametrize(
    ("body", "reply"),
    [
        (b"not json", "Bad format: register param json body invalid"),
        (b"[1]", "Bad format: register param json body invalid"),
        (b'{"mqName": "q", "accessToken": 5}', "Bad format: register param json body invalid"),
        (b'{"mqName": "q", "mqMode": "x"}', "Bad format: mqMode invalid"),
        (b'{"mqName": "q", "mqMode": 1.5}', "Bad format: mqMode invalid"),
        (b'{"mqName": "q", "mqMode": true}', "Bad format: mqMode invalid"),
        (b'{"mqName": "q", "mqMode": -1}', "Bad format: mqMode invalid"),
        (b'{"mqMode": "x"}', "Bad format: mqMode invalid"),
        (b'{"mqMode": 1}', "Bad format: Missing mq_name filed"),
        (b'{"mqName": null, "mqMode": 1}', "Bad format: Missing mq_name filed"),
        (b'{"mqName": "", "mqMode": 1}', "Bad format: mqName invalid"),
        (b'{"mqName": "a/b", "mqMode": 1}', "Bad format: mqName invalid"),
        (b'{"mqName": 7, "mqMode": 1}', "Bad format: mqName invalid"),
    ],
)
def test_create_mq_errors(body: bytes, reply: str) -> None:
    with pytest.raises(CreateMqError) as caught:
        parse_create_mq(body)
    assert caught.value.reply_body == reply


@pytest.mark.parametrize("name", ["MyMQ", "a", "订单.队列-1_x", "x" * 255, "é" * 127])
def test_valid_mq_names(name: str) -> None:
    assert is_valid_mq_name(name)


@pytest.mark.parametrize(
    "name",
    ["", "x" * 256, "é" * 128, "a b", "a\tb", "a\u3000b", "a\x00", "a\x7f", "a\x85"]
    + [f"a{c}b" for c in "/?&=%"],
)
def test_invalid_mq_names(name: str) -> None:
    assert not is_valid_mq_name(name)


def test_vocabulary() -> None:
    assert {c.value for c in BROKER_COMMANDS} == {
        "produce",
        "consume",
        "request",
        "heartbeat",
        "admin",
    }
    assert Command.TRACK_PUB == "track_pub"
    assert Command.TRACK_REPORT in TRACKER_COMMANDS
    assert Command.TRACK_SUB in TRACKER_COMMANDS
    assert {s.value for s in SubCommand} >= {"index", "jquery", "data", "create_mq"}
    assert (int(MqMode.MQ), int(MqMode.PUBSUB), int(MqMode.TEMP)) == (1, 2, 4)
    assert REPLY_QUEUE_MODE == 5
    assert (BROKER_PORT, TRACKER_PORT, TRACKER_HA_PORT) == (15555, 16666, 16667)
