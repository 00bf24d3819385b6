"""Properties past the JMQ4 attributes field (32,767 bytes): a zbus header block may be
64 KiB and VibeMQ allows 50 headers of 4,096 characters. The record stays a valid JMQ4
message (the lines that fit in ``attributes``, the rest in the extension behind
``PROPERTIES_TAG``) and every reader of the engine gives the whole map back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.engine import (
    RETRY_PARTITION,
    InvalidMessage,
    Message,
    RetryType,
    decode_attributes,
    decode_record,
    encode_record,
    message_view,
    record_parts,
    split_extension,
)
from brokers.engine.record import ATTRIBUTES_MAX, MAX_PROPERTIES, PROPERTIES_TAG
from brokers.engine.wire import check_wire
from brokers.protocols.jmq4 import BrokerMessage
from tests.engine.conftest import snapshot

MARKS = (b"", b"zb1\0", b"vm1\0", b"hm1\0")
keys = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)
values = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=30),
    st.integers(1, 20_000).map(lambda n: "v" * n),
    st.integers(1, 6_000).map(lambda n: "é✓" * n),  # escaped: six bytes a character
)


def encoded(props: dict[str, str], mark: bytes = b"") -> bytes:
    raw, _ = encode_record(
        Message(b"body", business_id="b1", attributes=props, extension=mark),
        app="app",
        partition=0,
        now_ms=1_000,
    )
    return raw


@settings(max_examples=60, deadline=None)
@given(props=st.dictionaries(keys, values, max_size=8), mark=st.sampled_from(MARKS))
def test_every_reader_gives_the_whole_map_and_jmq4_a_valid_message(props, mark):
    raw = encoded(props, mark)
    stored = decode_record(raw)
    assert (stored.attributes, stored.extension, stored.body) == (props, mark, b"body")
    assert message_view(raw).attributes == props
    parts = record_parts(raw)
    assert parts is not None and decode_attributes(parts.attribute_bytes) == props
    jmq4 = BrokerMessage.from_bytes(raw)  # what a JMQ4 consumer is sent, copied as stored
    assert len(jmq4.attributes.encode()) <= ATTRIBUTES_MAX
    assert jmq4.extension[: len(mark)] == mark  # the console still names the protocol
    shown = jmq4.attribute_map()
    assert all(props[k] == v for k, v in shown.items())  # whole lines, none cut
    if len(jmq4.extension) == len(mark):
        assert shown == props  # it all fitted: nothing carried in the extension


def test_a_40_kib_header_and_ten_of_4096_characters():
    props = {"msgid": "h40", "x-pad": "a" * (40 * 1024), "mq": "orders"}
    raw = encoded(props, b"zb1\0")
    assert decode_record(raw).attributes == props
    # the lines up to the one that does not fit: a JMQ4 consumer gets the msgid
    assert BrokerMessage.from_bytes(raw).attribute_map() == {"msgid": "h40"}
    ten = {f"k{i}": "v" * 4096 for i in range(10)} | {"messageId": "hl"}
    raw = encoded(ten, b"vm1\0")
    assert message_view(raw).attributes == ten
    assert split_extension(decode_record(raw).extension) == (b"vm1\0", b"")


def test_the_split_is_at_a_line_and_the_attributes_field_as_full_as_it_can_be():
    props = {f"k{i:02}": "x" * 1000 for i in range(40)}  # 40 lines of 1,005 bytes
    jmq4 = BrokerMessage.from_bytes(encoded(props))
    assert len(jmq4.attribute_map()) == 32  # 32 lines and their breaks fit, a 33rd not
    assert jmq4.extension.startswith(PROPERTIES_TAG)


def test_past_the_properties_limit_or_beside_a_producers_extension_is_refused():
    with pytest.raises(InvalidMessage, match="properties over"):
        encoded({"big": "x" * (MAX_PROPERTIES + 1)})
    with pytest.raises(InvalidMessage, match="beside an extension"):
        encoded({"big": "x" * 40_000}, b"longer than a mark")


def test_an_extension_without_the_tag_is_the_producers_own():
    own = b"\x01\x02 not properties \x00" * 3
    raw = encoded({"a": "1"}, own)
    assert decode_record(raw).extension == own
    assert split_extension(own) == (own, b"")


async def test_stored_fetched_and_retried_with_the_whole_map(make_engine, clock):
    """Appended through the engine, fetched, failed into the retry store and fetched from
    there (a copy the engine makes of the record): the whole map every time."""
    engine = make_engine(
        snapshot(topics={"t": {"partitions": 1}}, consumers=[{"topic": "t", "app": "a"}])
    )
    props = {"messageId": "m1", "pad": "p" * 50_000, "after": "yes"}
    await engine.append(
        "t", "a", [Message(b"big", attributes=props, extension=b"vm1\0")], partition=0
    )
    got = await engine.fetch("t", "a")
    [d] = got.messages
    assert d.message.attributes == props and d.message.extension == b"vm1\0"
    assert message_view(d.record).attributes == props
    await engine.ack("t", "a", 0, [0], retry_type=RetryType.EXCEPTION)
    [rec] = await engine.retries("t", "a")
    assert rec.message.attributes == props
    clock.advance(60)
    again = await engine.fetch("t", "a")
    assert again.partition == RETRY_PARTITION
    assert again.messages[0].message.attributes == props


PROPERTY_TEXT = st.binary(max_size=40).map(
    lambda b: "".join("ak=\\u0Az9:\n"[x % 11] for x in b)  # escapes, good and malformed
)


@settings(max_examples=300, deadline=None)
@given(attrs=PROPERTY_TEXT, more=st.one_of(st.none(), PROPERTY_TEXT), mark=st.sampled_from(MARKS))
def test_what_a_producer_may_store_every_reader_can_read(attrs, more, mark):
    """A JMQ4 producer writes the attributes text itself, and may write an extension that
    carries more behind PROPERTIES_TAG (a message it consumed, sent on). The produce check
    refuses text with a malformed ``\\uXXXX`` escape; a record that holds one anyway
    (stored before that check, or damaged) still reads, the escape as written, by every
    reader alike."""
    extension = mark + (PROPERTIES_TAG + more.encode() if more is not None else b"")
    raw = BrokerMessage(body=b"body", attributes=attrs, extension=extension, app="app").to_bytes()
    text = "\n".join(x for x in (attrs, more) if x).encode()
    try:
        check_wire(raw, 1, 1 << 20)
    except InvalidMessage as exc:
        assert "malformed" in str(exc)
        with pytest.raises(InvalidMessage, match="malformed"):
            decode_attributes(text, strict=True)
    else:
        assert decode_attributes(text, strict=True) == decode_attributes(text)
    assert message_view(raw).attributes == decode_record(raw).attributes


async def test_a_stored_record_with_a_malformed_escape_is_delivered_and_dead_lettered(
    make_engine,
):
    """A record whose properties no strict reader parses (stored before the produce check)
    does not stop its queue: it is leased with the escape as written, and out of
    attempts it reaches the dead-letter queue with its reason."""
    from brokers.engine import QueueSettings
    from brokers.engine.append import append_records

    queue = QueueSettings(max_retry_attempts=0, dead_letter_enabled=True)
    engine = make_engine(snapshot(topics={"q": {"partitions": 1, "queue": queue}}))
    raw = BrokerMessage(body=b"bad", attributes="a=\\uZZ", app="a").to_bytes()
    await append_records(engine.redis, engine.durability, "q", 0, [(raw, 1)])
    await engine.append_many("q", "a", [Message(b"good")])
    got = (await engine.lease("q", "a", count=10, owner="o")).deliveries
    assert [(d.message.body, d.message.attributes) for d in got] == [
        (b"bad", {"a": "\\uZZ"}),
        (b"good", {}),
    ]
    assert await engine.fail("q", "a", 0, [got[0].index]) == 1
    [dead] = (await engine.lease("q.dlq", "a", count=10, owner="o")).deliveries
    assert dead.message.body == b"bad"
    assert dead.message.attributes["deadLetterReason"] == "MaxRetriesExceeded"
