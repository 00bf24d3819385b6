"""A ``deliver`` frame written from a record's attribute text (the cached path every
VibeMQ-published record takes) is the frame the properties' dict makes, whatever the
record holds: any protocol's properties, ids, content types and bodies."""

from __future__ import annotations

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from brokers.engine import Delivery, encode_record, record_parts
from brokers.engine import Message as EngineMessage
from brokers.protocols.vibemq import Publish
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
