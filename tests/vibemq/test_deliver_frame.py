"""A ``deliver`` frame written from a record's attribute text (the cached path every
VibeMQ-published record takes) is the frame the properties' dict makes, whatever the
record holds: any protocol's properties, ids, content types and bodies."""

from __future__ import annotations

import base64

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from brokers.engine import Delivery, encode_record, record_parts
from brokers.engine import Message as EngineMessage
from brokers.protocols.vibemq import Publish, decode_json
from brokers.servers.vibemq.messages import (
    _deliver_from_text,
    _deliver_from_view,
    deliver_json,
    to_message,
)
from brokers.servers.zbus.stored import delivery_bytes

_KEYS = st.sampled_from(
    [
        "messageId",
        "msgid",
        ":content-type",
        ":status",
        "::trace",  # a publisher's own ":trace" as stored
        "deliveryAttempts",
        "encoding",
        "a",
        "b:c",
        "x y",
    ]
)
_VALUES = st.one_of(
    st.sampled_from(["", "m-1", "application/json", "Application/JSON; charset=utf-8", " x"]),
    st.text(alphabet="ab:=\\ \t\né\x00", max_size=6),
)
_BODIES = st.one_of(
    st.sampled_from([b"", b"null", b" null ", b'{"a":1}', b"[1, 2]", b'"s"', b"{bad", b"\xff"]),
    st.binary(max_size=12),
)


def _frames(record: bytes, attempts: int) -> tuple[tuple[str, bytes], tuple[str, bytes] | None]:
    delivery = Delivery(0, 7, 1, record, attempts=attempts)
    general = _deliver_from_view("q1", delivery, max(1, attempts))[:2]
    parts = record_parts(record)
    fast = None if parts is None else _deliver_from_text("q1", parts, max(1, attempts))
    assert deliver_json("q1", delivery)[:2] == general
    return general, fast


_PROPERTIES = st.lists(st.tuples(_KEYS, _VALUES), max_size=4)


@settings(max_examples=400, deadline=None)
@given(
    before=_PROPERTIES,
    message_id=st.none() | st.sampled_from(["m-1", "p-22"]) | _VALUES,
    after=_PROPERTIES,
    body=_BODIES,
    attempts=st.integers(0, 3),
)
@example([], "m-1", [("deliveryAttempts", "5")], b"x", 1)
@example([(":content-type", "application/json")], "m-1", [], b"[1]", 2)
def test_a_record_written_from_its_text_is_the_frame_its_properties_make(
    before: list[tuple[str, str]],
    message_id: str | None,
    after: list[tuple[str, str]],
    body: bytes,
    attempts: int,
) -> None:
    """Properties around a ``messageId`` (mostly a plain one, as publishers store it)."""
    properties = dict(before)
    if message_id is not None:
        properties["messageId"] = message_id
    properties.update(after)
    record = encode_record(
        EngineMessage(body, attributes=properties), app="a", now_ms=1_700_000_000_000
    )[0]
    for _ in range(2):  # cold, then from the cache
        general, fast = _frames(record, attempts)
        assert fast is None or fast == general


@settings(max_examples=200, deadline=None)
@given(
    message_id=st.text(min_size=1, max_size=12),
    headers=st.dictionaries(st.text(min_size=1, max_size=6), st.text(max_size=6), max_size=4),
    payload=st.one_of(st.none(), st.text(max_size=10), st.integers(), st.lists(st.booleans())),
)
@example("m", {":content-type": "application/json", ":trace": "t1", ":status": "500"}, "[1,2]")
def test_a_published_message_takes_the_text_path(message_id, headers, payload) -> None:
    """What a VibeMQ publisher stores — common ids and headers — is written from its text
    (the path is not left for rare records only), and as the dict path writes it: its
    payload and headers as published (a header named like a pseudo-property, such as
    ``:content-type``, is the publisher's header, not the broker's marker)."""
    frame = Publish(id=message_id, queue="q1", payload=payload, headers=headers)
    record = encode_record(to_message(frame), app="a", now_ms=1_700_000_000_000)[0]
    general, fast = _frames(record, 1)
    assert fast is None or fast == general
    texts = [message_id, *headers, *headers.values()]
    plain = all(t.isascii() and t.isalnum() for t in texts)  # written as they are
    if plain and "deliveryAttempts" not in headers and "messageId" not in headers:
        assert fast == general
    back = msgspec.json.decode(general[1])
    assert back["id"] == message_id and back["headers"]["deliveryAttempts"] == "1"
    assert back.get("payload") == payload
    published = {k: v for k, v in headers.items() if k not in ("deliveryAttempts", "messageId")}
    assert {k: v for k, v in back["headers"].items() if k != "deliveryAttempts"} == published


def test_a_publishers_status_header_does_not_make_a_zbus_response() -> None:
    """A VibeMQ header ``:status`` reaches a zbus consumer as no header at all (zbus has
    no header of that name), not as the status of a response."""
    frame = Publish(id="m1", queue="q1", payload="x", headers={":status": "500", "k": "v"})
    record = encode_record(to_message(frame), app="a", now_ms=1_700_000_000_000)[0]
    wire = delivery_bytes(record, msgid="c1")
    assert wire.startswith(b"HTTP/1.1 200 OK\r\n"), wire[:40]
    assert b"\r\nk: v\r\n" in wire and b"500" not in wire.split(b"\r\n\r\n")[0]


def _deliver(properties: dict[str, str], body: bytes) -> dict:
    record = encode_record(
        EngineMessage(body, attributes=properties), app="a", now_ms=1_700_000_000_000
    )[0]
    return msgspec.json.decode(deliver_json("q1", Delivery(0, 7, 1, record))[1])


def test_a_non_utf8_body_is_marked_beside_the_payload_not_in_the_headers() -> None:
    """A body that is not UTF-8 goes as base64 with the frame's field ``encoding``; the
    producer's headers stay as they were (before, the marker was the header ``encoding``:
    a zbus producer's ``encoding: gbk`` was overwritten with ``base64`` and lost)."""
    gbk = "中文消息".encode("gbk")
    frame = _deliver({"msgid": "z1", "encoding": "gbk", "x": "y"}, gbk)
    assert frame["encoding"] == "base64" and base64.b64decode(frame["payload"]) == gbk
    assert frame["headers"] == {"msgid": "z1", "encoding": "gbk", "x": "y", "deliveryAttempts": "1"}


def test_a_producers_encoding_header_marks_nothing() -> None:
    """A UTF-8 body with a producer's header ``encoding: base64`` (zbus, or a VibeMQ
    publisher's header) is delivered as the text it is, with no ``encoding`` field: a
    client that honours the field does not decode "hello" into other bytes."""
    frame = _deliver({"msgid": "z2", "encoding": "base64"}, b"hello")
    assert "encoding" not in frame and frame["payload"] == "hello"
    assert frame["headers"]["encoding"] == "base64"
    published = Publish(id="v1", queue="q1", payload="p", headers={"encoding": "base64"})
    record = encode_record(to_message(published), app="a", now_ms=1_700_000_000_000)[0]
    back = msgspec.json.decode(deliver_json("q1", Delivery(0, 7, 1, record))[1])
    assert "encoding" not in back and back["payload"] == "p"
    assert back["headers"] == {"encoding": "base64", "deliveryAttempts": "1"}


def test_a_binary_publish_stores_its_bytes_and_comes_back_marked() -> None:
    """``"encoding": "base64"`` on a publish stores the bytes the payload holds (what a
    zbus or JMQ4 consumer reads as they are); delivered, they come back the same way."""
    published = decode_json(
        b'{"id":"b1","type":"publish","queue":"q1","payload":"/wDW0A==","encoding":"base64",'
        b'"headers":{"encoding":"gbk"}}'
    )
    assert isinstance(published, Publish)
    message = to_message(published)
    assert message.body == b"\xff\x00\xd6\xd0" and message.attributes["encoding"] == "gbk"
    record = encode_record(message, app="a", now_ms=1_700_000_000_000)[0]
    frame = msgspec.json.decode(deliver_json("q1", Delivery(0, 7, 1, record))[1])
    assert (frame["id"], frame["payload"], frame["encoding"]) == ("b1", "/wDW0A==", "base64")
    assert frame["headers"] == {"encoding": "gbk", "deliveryAttempts": "1"}
