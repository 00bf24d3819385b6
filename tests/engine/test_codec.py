"""Record codec: JMQ4 layout, properties attributes, batch bodies (property-based)."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import (
    BatchItem,
    InvalidMessage,
    Message,
    MessageTooLarge,
    decode_attributes,
    decode_batch_body,
    decode_record,
    encode_attributes,
    encode_batch_body,
    encode_record,
    message_view,
)
from brokers.engine.record import check_record, split_extension
from brokers.engine.wire import WireBlob, check_batch_body, check_wire, stamp_wire, wire_records

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)


@given(st.dictionaries(text.filter(bool), text, max_size=5))
def test_attributes_round_trip(attrs):
    assert decode_attributes(encode_attributes(attrs)) == attrs


def test_attribute_escaping_and_java_syntax():
    assert encode_attributes({"a b": " x=y", "k": "é\t"}) == b"a\\ b=\\ x\\=y\nk=\\u00E9\\t"
    text = b"# comment\n! other\n  key1 = value1\nkey2:value2\nkey3 value3\nlong = a\\\n    b\n"
    assert decode_attributes(text) == {
        "key1": "value1",
        "key2": "value2",
        "key3": "value3",
        "long": "ab",
    }
    assert decode_attributes(b"") == {}


def test_batch_vector_from_the_spec():
    body = encode_batch_body(
        [BatchItem(b"a", business_id="x"), BatchItem(b"bc", attributes={"k": "v"})]
    )
    assert (
        body.hex()
        == "00000010000000000000016101780000" + "0000001300000000000002626300" + "00036b3d76"
    )
    items = decode_batch_body(body, 2)
    assert [(i.body, i.business_id, i.attributes) for i in items] == [
        (b"a", "x", {}),
        (b"bc", "", {"k": "v"}),
    ]
    with pytest.raises(InvalidMessage):
        decode_batch_body(body, 3)
    with pytest.raises(InvalidMessage):
        decode_batch_body(body[:-1])


@given(
    body=st.binary(max_size=200),
    bid=st.text(max_size=30).filter(lambda s: len(s.encode()) <= 100),
    prio=st.integers(-128, 127),
    send=st.integers(1, 2**41),
    attrs=st.dictionaries(text.filter(bool), text, max_size=3),
    # an extension that starts with PROPERTIES_TAG is the engine's: it carries properties
    ext=st.binary(max_size=20).filter(lambda e: split_extension(e) == (e, b"")),
)
def test_record_round_trip(body, bid, prio, send, attrs, ext):
    raw, count = encode_record(
        Message(
            body, business_id=bid, attributes=attrs, priority=prio, send_time_ms=send, extension=ext
        ),
        app="app",
        partition=3,
        now_ms=send + 5,
        client_address="10.0.0.2:443",
    )
    assert count == 1 and struct.unpack(">i", raw[:4])[0] == len(raw)
    msg = decode_record(raw)
    assert (msg.body, msg.business_id, msg.priority, msg.send_time_ms) == (body, bid, prio, send)
    assert (msg.attributes, msg.extension, msg.app, msg.partition) == (attrs, ext, "app", 3)
    assert msg.store_time_ms == send + 5 and msg.client_address == "10.0.0.2:443"
    assert check_record(raw).size == len(raw)


@given(
    body=st.binary(max_size=80),
    bid=st.text(max_size=30).filter(lambda s: len(s.encode()) <= 100),
    attrs=st.dictionaries(text.filter(bool), text, max_size=3),
    ext=st.binary(max_size=20).filter(lambda e: split_extension(e) == (e, b"")),
    cut=st.integers(0, 300),
    flip=st.tuples(st.integers(0, 300), st.integers(0, 255)),
)
def test_message_view_reads_what_decode_record_reads(body, bid, attrs, ext, cut, flip):
    """The light reader HTTP-MQ hands messages out with gives decode_record's store time,
    body and attributes for every record, and for a damaged one either the same verdict
    as decode_record (InvalidMessage) or decode_record's own fields."""
    raw, _ = encode_record(
        Message(body, business_id=bid, attributes=attrs, send_time_ms=7_000, extension=ext),
        app="app",
        partition=1,
        now_ms=7_003,
    )
    assert message_view(raw) == (7_003, body, bid, attrs)
    damaged = bytearray(raw[: len(raw) - cut] if cut < len(raw) else raw)
    if flip[0] < len(damaged):
        damaged[flip[0]] = flip[1]
    try:
        full = decode_record(bytes(damaged))
    except InvalidMessage:
        try:
            view = message_view(bytes(damaged))
        except InvalidMessage:
            return
        # the view reads fewer fields: a record damaged only in those it skips still reads
        assert view[1] == damaged[65 : 65 + len(view[1])]
        return
    assert message_view(bytes(damaged)) == (
        full.store_time_ms,
        full.body,
        full.business_id,
        full.attributes,
    )


def test_layout_offsets():
    raw, _ = encode_record(Message(b"hi", send_time_ms=1000), app="ap", partition=7, now_ms=1010)
    assert len(raw) == 73 + 2 + 2
    assert raw[4:6] == b"\x00\x07" and raw[18:20] == b"\x12\x34"
    assert struct.unpack(">h", raw[20:22])[0] == 0x018C  # Java client default + IPv4 bit
    assert struct.unpack(">i", raw[47:51])[0] == 10


def test_invalid_records_are_rejected():
    raw, _ = encode_record(Message(b"hi"), app="ap", now_ms=1)
    with pytest.raises(InvalidMessage):
        check_record(raw[:-1])
    with pytest.raises(InvalidMessage):
        check_record(raw[:4] + b"\x00" + raw[5:] + b"x")
    bad_sys = bytearray(raw)
    bad_sys[20:22] = struct.pack(">h", 0x2000)
    with pytest.raises(InvalidMessage):
        check_record(bytes(bad_sys))
    bad_magic = bytearray(raw)
    bad_magic[18:20] = b"\x00\x00"
    with pytest.raises(InvalidMessage):
        decode_record(bytes(bad_magic))
    batch = bytearray(raw)
    batch[20:22] = struct.pack(">h", 0x118C)  # batch bit, flag 0, body not a batch
    with pytest.raises(InvalidMessage):
        check_wire(bytes(batch), 1, 1 << 20)


def _verdict(check, raw: bytes):
    try:
        return check(raw)
    except (InvalidMessage, MessageTooLarge) as exc:
        return type(exc)


@given(
    body=st.binary(max_size=60),
    bid=st.text(max_size=120),
    sys_code=st.sampled_from([0x010C, 0x018C, 0x110C, 0x1000, 0x1001, 0x2000, -1]),
    flag=st.integers(-2, 3),
    cut=st.integers(0, 400),
    flip=st.tuples(st.integers(0, 400), st.integers(0, 255)),
)
def test_fast_wire_check_agrees_with_full_check(body, bid, sys_code, flag, cut, flip):
    """The one-walk check of a single record accepts and rejects exactly what check_record does."""
    raw, _ = encode_record(Message(body), app="ap", partition=1, now_ms=7)
    bid_raw = bid.encode()[:127]
    bid_raw = bid_raw.decode("utf-8", "ignore").encode()
    head = bytearray(raw[: 65 + len(body)])
    tail = raw[65 + len(body) + 1 :]
    rec = bytearray(head + bytes([len(bid_raw)]) + bid_raw + tail)
    struct.pack_into(">i", rec, 0, len(rec))
    struct.pack_into(">h", rec, 20, sys_code)
    struct.pack_into(">h", rec, 59, flag)
    if flip[0] < len(rec):
        rec[flip[0]] = flip[1]
    data = bytes(rec[: len(rec) - cut % 3])
    full = _verdict(lambda r: check_record(r, max_body=40), data)
    fast = _verdict(lambda r: check_wire(r, 1, 40), data)
    if isinstance(full, type):
        assert fast is full
    else:
        facts = (fast.sys_codes[0], fast.send_times[0], fast.counts[0])
        assert facts == (full.sys_code, full.send_time_ms, full.count)


# ---------------------------------------------------------------- one blob per append


@st.composite
def wire_record(draw: st.DrawFn) -> bytes:
    """A JMQ4 record, often valid, sometimes with one bad field, a flipped byte or cut."""
    body = draw(st.binary(max_size=60))
    bid = draw(st.text(max_size=120)).encode()[:127].decode("utf-8", "ignore").encode()
    attrs = draw(st.sampled_from([None, {"k": "v"}, {"u": "é"}]))
    raw, _ = encode_record(
        Message(body, attributes=attrs, send_time_ms=draw(st.integers(0, 2**40))),
        app=draw(st.sampled_from(["ap", "app", "é"])),
        partition=1,
        now_ms=7,
    )
    head, tail = raw[: 65 + len(body)], raw[65 + len(body) + 1 :]
    rec = bytearray(head + bytes([len(bid)]) + bid + tail)
    struct.pack_into(">i", rec, 0, len(rec))
    if draw(st.booleans()):
        sys_code = draw(st.sampled_from([0x010C, 0x110C, 0x1000, 0x1001, 0x2000, -1]))
        struct.pack_into(">h", rec, 20, sys_code)
        struct.pack_into(">h", rec, 59, draw(st.integers(-2, 3)))
    if draw(st.integers(0, 3)) == 0:
        rec[draw(st.integers(0, len(rec) - 1))] = draw(st.integers(0, 255))
    return bytes(rec[: len(rec) - draw(st.integers(0, 12)) // 10])


@given(records=st.lists(wire_record(), min_size=1, max_size=4))
def test_check_wire_agrees_with_check_record(records):
    """One walk over the blob accepts exactly the records check_record accepts, one by one."""
    verdicts = [_verdict(lambda r: check_record(r, max_body=40), r) for r in records]
    blob = b"".join(records)
    wire = _verdict(lambda b: check_wire(b, len(records), 40), blob)
    if all(not isinstance(v, type) for v in verdicts):
        assert wire.offsets == tuple(
            itertools.accumulate((len(r) for r in records[:-1]), initial=0)
        )
        assert wire.counts == tuple(v.count for v in verdicts)
        assert wire.sys_codes == tuple(v.sys_code for v in verdicts)
        assert wire.send_times == tuple(v.send_time_ms for v in verdicts)
        assert wire.total == sum(v.count for v in verdicts)
        assert wire_records(records, 40).offsets == wire.offsets
    else:
        assert isinstance(wire, type) and issubclass(wire, InvalidMessage)
        with pytest.raises(InvalidMessage):
            wire_records(records, 40)
    if len(records) == 1:
        assert (wire if isinstance(wire, type) else None) == (
            verdicts[0] if isinstance(verdicts[0], type) else None
        )


@given(
    records=st.lists(wire_record(), min_size=1, max_size=4),
    partition=st.integers(0, 99),
    first=st.integers(0, 2**40),
    now=st.integers(0, 2**42),
    address=st.sampled_from([None, "10.0.0.9:80", "[::1]:9"]),
)
def test_stamp_wire_is_check_wire_then_stamp_in_one_walk(records, partition, first, now, address):
    """The fused walk raises what check_wire raises and stamps what WireRecords.stamp stamps."""
    blob = b"".join(records)
    checked = _verdict(lambda b: check_wire(b, len(records), 40), blob)
    stamp = {"partition": partition, "now_ms": now, "client_address": address, "first": first}
    fused = _verdict(lambda b: stamp_wire(WireBlob(b, len(records)), 40, **stamp), blob)
    if isinstance(checked, type):
        assert fused is checked
    else:
        assert fused.blob == checked.stamp(**stamp)
        assert tuple(fused.counts) == checked.counts and fused.total == checked.total


def test_the_store_writes_the_term():
    """jmq4.md §3: term is written by the store, whatever the client sent."""
    rec = _patched(_plain(), 14, ">i", 12345)
    assert struct.unpack_from(">i", rec, 14) == (12345,)
    stamped = wire_records([rec, rec], 40).stamp(partition=3, now_ms=2_000)
    fused = stamp_wire(WireBlob(rec + rec, 2), 40, partition=3, now_ms=2_000)
    for blob in (stamped, fused.blob):
        assert [decode_record(blob[i : i + len(rec)]).term for i in (0, len(rec))] == [0, 0]


def _plain(body: bytes = b"x", **kwargs: object) -> bytes:
    raw, _ = encode_record(Message(body, send_time_ms=1_000), app="ap", now_ms=0, **kwargs)  # type: ignore[arg-type]
    return raw


def _patched(raw: bytes, offset: int, fmt: str, value: object) -> bytes:
    rec = bytearray(raw)
    struct.pack_into(fmt, rec, offset, value)
    return bytes(rec)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (_plain()[:-1], InvalidMessage),  # cut: size disagrees
        (_plain() + b"x", InvalidMessage),  # trailing byte
        (_patched(_plain(), 0, ">i", 999), InvalidMessage),  # declared size
        (_patched(_plain(), 18, ">h", 0x4321), InvalidMessage),  # magic
        (_patched(_plain(), 20, ">h", 0x210C), InvalidMessage),  # reserved sysCode bit 13
        (_patched(_plain(), 20, ">h", -0x7EF4), InvalidMessage),  # reserved sysCode bit 15
        (_plain(b"y" * 41), MessageTooLarge),  # body over max_body
        (_patched(_plain(), 20, ">h", 0x110C), InvalidMessage),  # batch flag 0
        (_patched(_patched(_plain(), 20, ">h", 0x110C), 59, ">h", 1), InvalidMessage),  # body
        (_patched(_plain(), 61, ">i", -1), InvalidMessage),  # negative body length
    ],
)
def test_check_wire_rejects_each_rule(bad, error):
    good = _plain()
    for blob, count in ((bad, 1), (good + bad, 2), (bad + good, 2)):
        with pytest.raises(error):
            check_wire(blob, count, 40)
    with pytest.raises(InvalidMessage):
        check_wire(good, 2, 40)  # fewer records than announced
    with pytest.raises(InvalidMessage):
        check_wire(good + good, 1, 40)  # bytes after the announced records
    with pytest.raises(InvalidMessage):
        check_wire(b"", 0, 40)


def test_check_wire_rejects_bad_strings():
    body_end = 65 + 1
    raw = _plain()
    long_bid = bytearray(raw[:body_end] + bytes([101]) + b"b" * 101 + raw[body_end + 1 :])
    struct.pack_into(">i", long_bid, 0, len(long_bid))
    bad_utf8 = bytearray(raw[:body_end] + b"\x02\xff\xfe" + raw[body_end + 1 :])
    struct.pack_into(">i", bad_utf8, 0, len(bad_utf8))
    bad_app = raw[:-2] + b"\xc3\x28"
    for bad in (bytes(long_bid), bytes(bad_utf8), bad_app, raw[:body_end] + b"\xff" + raw[67:]):
        for blob, count in ((bad, 1), (raw + bad, 2), (bad + raw, 2)):
            with pytest.raises(InvalidMessage):
                check_wire(blob, count, 40)
    # a record cut right after its body: the fast path must not take a lone byte for a tail
    assert len(check_wire(raw + raw, 2, 40)) == 2
    with pytest.raises(InvalidMessage):
        check_wire(raw[:body_end] + b"\xff", 1, 40)


def test_stamp_patches_partition_index_store_time_and_client_ip():
    batch = encode_record(
        Message.batch([BatchItem(b"a"), BatchItem(b"b")], send_time_ms=900),
        app="ap",
        now_ms=0,
        client_address="[2001:db8::1]:7",
    )[0]
    records = [_plain(), batch, _plain(b"z")]
    wire = check_wire(b"".join(records), 3, 40)
    assert wire.counts == (1, 2, 1) and wire.total == 4
    stamped = wire.stamp(partition=5, now_ms=1_250, client_address="10.0.0.9:80", first=40)
    parts = [r for r, _ in wire.records(stamped)]
    assert [c for _, c in wire.records(stamped)] == [1, 2, 1]
    got = [decode_record(p) for p in parts]
    assert [m.index for m in got] == [40, 41, 43]
    assert {m.partition for m in got} == {5}
    assert [m.store_time_ms for m in got] == [1_250] * 3
    assert [m.client_address for m in got] == ["10.0.0.9:80"] * 3
    assert all(m.sys_code & 0x80 for m in got)  # IPv4: short address bit set
    for before, after in zip(records, parts, strict=True):
        # nothing but partition, index, sysCode bit 7, clientIp and storeTime changed
        assert len(before) == len(after)
        assert before[14:20] == after[14:20] and before[22] == after[22]
        assert before[39:47] == after[39:47] and before[51:] == after[51:]
    v6 = wire.stamp(partition=0, now_ms=1_000, client_address="[::1]:9")
    assert not decode_record(wire.records(v6)[0][0]).sys_code & 0x80
    same = wire.stamp(partition=0, now_ms=2**40)  # clientIp kept, storeTime clamped
    kept = decode_record(wire.records(same)[1][0])
    assert kept.client_ip == decode_record(batch).client_ip
    assert kept.store_time_ms - kept.send_time_ms == 2**31 - 1


@st.composite
def batch_bodies(draw: st.DrawFn) -> tuple[bytes, int]:
    """A batch body of a few items, sometimes mutated."""
    items = draw(
        st.lists(
            st.builds(
                BatchItem,
                body=st.binary(max_size=12),
                business_id=st.sampled_from(["", "k", "é", "b" * 100]),
                attributes=st.sampled_from([None, {"k": "v"}, {"é": "\\u"}]),
            ),
            min_size=1,
            max_size=4,
        )
    )
    body = bytearray(encode_batch_body(items))
    for _ in range(draw(st.integers(0, 2))):
        pos = draw(st.integers(0, max(0, len(body) - 1)))
        kind = draw(st.integers(0, 2))
        if kind == 0 and body:
            body[pos] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, 0x5C, 0x75]))
        elif kind == 1:
            del body[pos:]
        else:
            body[pos:pos] = draw(st.sampled_from([b"\\u", b"\\u12", b"\xff", b"\x00" * 3]))
    return bytes(body), len(items) + draw(st.integers(-1, 1))


@given(batch=batch_bodies())
def test_fast_batch_check_agrees_with_decode_batch_body(batch):
    body, count = batch
    full = _verdict(lambda b: decode_batch_body(b, count, strict=True), body)
    padded = b"\x00\x00\x00\x0e" + body + b"\x00\x00\x00\x0e\x00"
    fast = _verdict(lambda b: check_batch_body(b, 4, 4 + len(body), count), padded)
    assert (fast if isinstance(fast, type) else None) == (full if isinstance(full, type) else None)


@given(
    st.text(
        alphabet=st.characters(blacklist_characters="\\", blacklist_categories=("Cs",)),
        max_size=200,
    )
)
def test_plain_attribute_text_parses_as_the_full_parser_does(text: str) -> None:
    from brokers.engine.record import _full_attributes, _plain_attributes

    assert _plain_attributes(text) == _full_attributes(text)


@given(
    st.dictionaries(
        st.text(max_size=20).filter(lambda k: k != ""),
        st.text(max_size=40),
        max_size=8,
    )
)
def test_attribute_escaping_fast_path_round_trips(attrs: dict) -> None:
    from brokers.engine.record import _escape

    for text in [*attrs, *attrs.values()]:
        for key in (True, False):
            escaped = _escape(text, key=key)
            if escaped == text:  # the fast path: nothing in it needed escaping
                assert not any(c in text for c in "\\=:#!\t\n\r\f")
                assert all(0x20 <= ord(c) <= 0x7E for c in text)
                assert not text.startswith(" ") and (not key or " " not in text)
    assert decode_attributes(encode_attributes(attrs)) == attrs


def _escape_char_by_char(text: str, *, key: bool) -> str:
    """The Java-Properties escape of printable ASCII, one character at a time (what the
    codec's translate tables must equal)."""
    out = []
    for pos, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "=:#!":
            out.append("\\" + ch)
        elif ch == " ":
            out.append("\\ " if key or pos == 0 else " ")
        else:
            out.append(ch)
    return "".join(out)


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40))
def test_printable_attributes_escape_as_character_by_character(text: str) -> None:
    from brokers.engine.record import _escape

    for key in (True, False):
        assert _escape(text, key=key) == _escape_char_by_char(text, key=key)
        assert decode_attributes(encode_attributes({"k": text})) == {"k": text}


def _unescape_char_by_char(text: str) -> str:
    """Java-Properties unescaping one character at a time (the codec's regex must agree)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise InvalidMessage("malformed \\uXXXX in attributes")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        i += 2
    joined = "".join(out)
    return joined.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


_ESCAPED_PIECES = [*"ab =:\\\t\f\n\r#!u0", "\\u0041", "\\u00e9", "\\uD83D\\uDE00", "\\u12", "\\"]


@given(st.lists(st.sampled_from(_ESCAPED_PIECES), max_size=40).map("".join))
def test_unescape_agrees_with_character_by_character(text: str) -> None:
    from brokers.engine.record import _unescape

    try:
        expected = _unescape_char_by_char(text)
    except InvalidMessage:
        with pytest.raises(InvalidMessage):
            _unescape(text)
        return
    assert _unescape(text) == expected


def _full_attributes_char_by_char(text: str) -> dict[str, str]:
    """The escaped-text parser one character at a time (the codec's regex must agree)."""
    from brokers.engine.record import _logical_lines

    _unescape = _unescape_char_by_char

    result: dict[str, str] = {}
    for line in _logical_lines(text):
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                break
            i += 1
        key = line[:i]
        while i < n and line[i] in " \t\f":
            i += 1
        if i < n and line[i] in "=:":
            i += 1
            while i < n and line[i] in " \t\f":
                i += 1
        result[_unescape(key)] = _unescape(line[i:])
    return result


@given(st.lists(st.sampled_from(_ESCAPED_PIECES), max_size=40).map("".join))
def test_escaped_attribute_text_parses_as_character_by_character(text: str) -> None:
    from brokers.engine.record import _full_attributes

    try:
        expected = _full_attributes_char_by_char(text)
    except InvalidMessage:
        with pytest.raises(InvalidMessage):
            _full_attributes(text)
        return
    assert _full_attributes(text) == expected


@given(sys_code=st.integers(-(2**15), 2**15 - 1))
def test_needs_opening_reads_the_batch_and_compressed_bits(sys_code: int) -> None:
    from brokers.engine.unbatch import needs_opening

    raw, _ = encode_record(Message(b"x"), app="a", now_ms=1)
    record = raw[:20] + struct.pack(">h", sys_code) + raw[22:]
    assert needs_opening(record) == bool(sys_code & 0x1001)


@given(st.lists(st.sampled_from([*"ab =:\t\f\n\r#!", "\\:", "\\:\\:", "\ue000", "é"]), max_size=40))
def test_colon_escaped_attribute_text_parses_as_the_full_parser_does(pieces: list[str]) -> None:
    """Text whose only escapes are ``\\:`` takes a shortcut (colons set aside, parsed as
    plain); it must read as the full parser reads it."""
    from brokers.engine.record import _full_attributes

    text = "".join(pieces)
    assert decode_attributes(text.encode("utf-8")) == _full_attributes(text)


@pytest.mark.parametrize("text", ["a=\n", "a=b\n", "a=\nb", "a=\\:\n", "\\:a=\n\n"])
def test_a_trailing_line_break_is_not_the_one_regex_shortcut(text: str) -> None:
    """The line-by-line path of plain ``key=value`` lines must not take a trailing or
    empty line (CPython 3.11.2's re, with possessive repeats, matched ``a=`` + newline
    whole)."""
    from brokers.engine.record import _full_attributes

    assert decode_attributes(text.encode()) == _full_attributes(text)


# Mostly plain keys and values (so the shortcut is taken often), some with anything that
# must send the text down the full parser.
_KEYS = st.builds(
    lambda prefix, key: prefix + key,
    st.sampled_from(["", "\\:"]),
    st.one_of(
        st.text(alphabet="abé", min_size=1, max_size=3),
        st.text(alphabet="ab:=\\ #!é\t\x0b\xa0", max_size=4),
    ),
)
_VALUES = st.one_of(
    st.lists(st.sampled_from(["a", "b", "=", ":", "é", "\\:", "\\=", "\\"]), max_size=4).map(
        "".join
    ),
    st.text(alphabet="ab =:\t\f\\#é\r\x85\u2028", max_size=5),
)


@given(
    st.lists(st.tuples(_KEYS, st.sampled_from("==: "), _VALUES), min_size=1, max_size=4),
    st.sampled_from(["", "", "\n", " "]),
)
def test_simple_attribute_text_parses_as_the_full_parser_does(lines, tail: str) -> None:
    """Plain ``key=value`` lines (a key may open with ``\\:``) take the one-regex shortcut;
    whatever text it accepts must read as the full parser reads it."""
    from brokers.engine.record import _full_attributes

    text = "\n".join(k + sep + v for k, sep, v in lines) + tail
    expected = _full_attributes(text)
    assert decode_attributes(text.encode("utf-8")) == expected
    assert decode_attributes(text.encode("utf-8")) == expected  # again: lines from the cache


def test_what_the_protocols_write_takes_the_simple_path() -> None:
    from brokers.engine.record import _SIMPLE_ONE

    for attributes in (
        {"messageId": "3f2a9c1e-0000-4000-8000-000000000001", ":content-type": "application/json"},
        {"msgid": "m-1", "topic": "orders", "empty": "", "spaced": "a b"},
        {"remote-addr": "127.0.0.1:45678", "broker": "[::1]:15555", "eq": "a=b"},
    ):
        text = encode_attributes(attributes).decode()
        assert all(_SIMPLE_ONE.fullmatch(line) for line in text.split("\n")), text
        assert decode_attributes(text.encode()) == attributes


@given(st.text(alphabet="ab =:\t\f\\#é\r\x85\u2028\x0b", max_size=6))
def test_a_known_key_reads_any_value_as_the_full_parser_does(value: str) -> None:
    """A key read once is known: its later lines skip the pattern when the value is plain,
    and read as the full parser reads them whatever the value."""
    from brokers.engine.record import _full_attributes

    decode_attributes(b"messageId=first")
    text = f"messageId={value}\ntopic=orders"
    assert decode_attributes(text.encode()) == _full_attributes(text)


def test_lines_of_varying_values_do_not_crowd_the_line_cache() -> None:
    from brokers.engine.record import _LINES_READ

    decode_attributes(b"messageId=m-0\nkind=order")
    before = len(_LINES_READ)
    for i in range(1, 200):
        assert decode_attributes(f"messageId=m-{i}\nkind=order".encode()) == {
            "messageId": f"m-{i}",
            "kind": "order",
        }
    assert len(_LINES_READ) == before


@given(
    st.lists(st.tuples(_KEYS, st.sampled_from("==: "), _VALUES), max_size=4),
    st.sampled_from(["id", "\\:id"]),
    _VALUES,
    st.lists(st.tuples(_KEYS | st.just("id"), st.sampled_from("==: "), _VALUES), max_size=4),
)
def test_attribute_text_split_around_a_key_reads_as_the_whole(before, key, value, after) -> None:
    """Where :func:`split_attribute_text` splits a text and every other line reads the
    common way, the value and the other lines read as the whole text does (the
    delivery paths of zbus and VibeMQ frame a record from the two texts)."""
    from brokers.engine import attribute_lines, read_attribute_line, split_attribute_text
    from brokers.engine.record import _full_attributes

    lines = [k + sep + v for k, sep, v in before] + [f"{key}={value}"]
    lines += [k + sep + v for k, sep, v in after]
    text = "\n".join(lines)
    split = split_attribute_text(text, "id")
    if split is None:
        return
    text_before, found, text_after = split
    middle = text[len(text_before) : len(text) - len(text_after)]
    assert text == text_before + middle + text_after
    assert middle.startswith("id=") and "\n" not in middle
    others = [read_attribute_line(line) for line in attribute_lines(text_before, text_after)]
    if None in others or any(k == "id" for k, _ in others):
        return  # the callers' general path
    whole = _full_attributes(text)
    assert whole.pop("id") == found
    assert whole == dict(others)


def test_attribute_text_split_examples() -> None:
    from brokers.engine import attribute_lines, read_attribute_line, split_attribute_text

    assert split_attribute_text("a=1\nid=x\\:y\nb=2", "id") == ("a=1\n", "x:y", "\nb=2")
    assert split_attribute_text("id=7", "id") == ("", "7", "")
    assert attribute_lines("a=1\n", "\nb=2") == ["a=1", "b=2"]
    assert attribute_lines("", "") == []
    assert split_attribute_text("xid=1\n id=2\nid= 3", "id") is None  # none written plainly
    # a line continued into the id line: split, but the line before is not read
    before, _, _ = split_attribute_text("a=1\\\nid=2", "id")
    assert [read_attribute_line(line) for line in attribute_lines(before, "")] == [None]


def test_attributes_not_str_are_written_by_their_str() -> None:
    """Values outside the type (an int, an unhashable list) are written as ``str()`` makes
    them, whether or not the line cache can hold them."""
    written = encode_attributes({"a": 1, "b": [1, 2], "c": "x"})  # type: ignore[dict-item]
    assert decode_attributes(written) == {"a": "1", "b": "[1, 2]", "c": "x"}
    assert encode_attributes({"a": 1}) == encode_attributes({"a": "1"})  # type: ignore[dict-item]
