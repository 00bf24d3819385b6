"""Java Properties encoding and decoding of message attributes (spec §3.3)."""

from __future__ import annotations

import pytest

from brokers.protocols import jmq4


def test_encoding_escapes_like_properties_store() -> None:
    assert jmq4.encode_attributes({"k": "v", "a": "b"}) == "k=v\na=b"
    assert jmq4.encode_attributes({"a b": " c d "}) == "a\\ b=\\ c d "
    assert jmq4.encode_attributes({"x=:#!": "\\\t\n\r\f"}) == "x\\=\\:\\#\\!=\\\\\\t\\n\\r\\f"
    assert jmq4.encode_attributes({"é": "\x01\x7f😀"}) == "\\u00E9=\\u0001\\u007F\\uD83D\\uDE00"
    assert jmq4.encode_attributes({}) == ""
    assert jmq4.encode_attributes(None) == ""


def test_empty_decodes_to_no_attributes() -> None:
    assert jmq4.decode_attributes("") == {}
    assert jmq4.decode_attributes(None) == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=b", {"a": "b"}),
        ("a:b", {"a": "b"}),
        ("a b", {"a": "b"}),
        ("a\tb", {"a": "b"}),
        ("a\fb", {"a": "b"}),
        ("a = b", {"a": "b"}),
        ("a  :  b  ", {"a": "b  "}),
        ("a==b", {"a": "=b"}),
        ("a =:b", {"a": ":b"}),
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("=b", {"": "b"}),
        ("   indented=yes", {"indented": "yes"}),
        ("# comment\n! other\nk=v", {"k": "v"}),
        ("  # indented comment\nk=v", {"k": "v"}),
        ("k=v # not a comment", {"k": "v # not a comment"}),
        ("\n\n\r\nk=v\n\n", {"k": "v"}),
        ("a=1\rb=2\r\nc=3", {"a": "1", "b": "2", "c": "3"}),
        ("k=long \\\n    value", {"k": "long value"}),
        ("k=a\\\r\n  b\\\r  c", {"k": "abc"}),
        ("k=\\\n# not a comment", {"k": "# not a comment"}),
        ("k=v\\\\\nx=y", {"k": "v\\", "x": "y"}),
        ("k=end\\", {"k": "end"}),
        ("k=\\\n\nx=y", {"k": "", "x": "y"}),
        ("# comment \\\nk=v", {"k": "v"}),
        ("a\\ b\\=c=d", {"a b=c": "d"}),
        ("k=\\t\\n\\r\\f\\q\\\\", {"k": "\t\n\r\f" + "q\\"}),
        ("k=\\u0041\\u00e9\\uD83D\\uDE00", {"k": "Aé😀"}),
        ("dup=1\ndup=2", {"dup": "2"}),
        ("ключ=значение", {"ключ": "значение"}),
    ],
)
def test_decoding_accepts_full_properties_syntax(text: str, expected: dict[str, str]) -> None:
    assert jmq4.decode_attributes(text) == expected


@pytest.mark.parametrize("text", ["k=\\u12", "k=\\u12G4", "\\uZZZZ=v"])
def test_malformed_unicode_escape(text: str) -> None:
    with pytest.raises(jmq4.DecodeError):
        jmq4.decode_attributes(text)


def test_message_attribute_map() -> None:
    message = jmq4.BrokerMessage(attributes=jmq4.encode_attributes({"k": "v", "x y": "z"}))
    assert message.attribute_map() == {"k": "v", "x y": "z"}
