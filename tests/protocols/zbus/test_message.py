"""URI parameters, header spellings and the zbus field accessors (zbus.md §2–§4, §8, §9)."""

from __future__ import annotations

import pytest

from brokers.protocols.zbus import AliasFamily, Decoder, Message, RequestLine, StatusLine


def decode(data: bytes) -> Message:
    (message,) = Decoder().feed(data)
    assert isinstance(message, Message)
    return message


def request(uri: str, *headers: str, body: bytes = b"") -> Message:
    lines = [f"GET {uri} HTTP/1.1", *headers]
    if body:
        lines.append(f"content-length: {len(body)}")
    return decode(("\r\n".join(lines) + "\r\n\r\n").encode() + body)


# §2 examples table (seed URI form)


def test_uri_produce_with_body_parameter() -> None:
    message = request("/MyMQ?cmd=produce&&msgid=m1&&body=hello")
    assert message.command == "produce"
    assert message.mq == "MyMQ"
    assert message.msgid == "m1"
    assert message.body == b"hello"
    assert "body" not in message.headers


def test_uri_consume() -> None:
    message = request("/MyMQ?cmd=consume&&msgid=c1")
    assert (message.command, message.mq, message.msgid) == ("consume", "MyMQ", "c1")


def test_uri_admin_index() -> None:
    message = request("/?cmd=admin&&method=index")
    assert message.command == "admin"
    assert message.sub_cmd == "index"
    assert message.mq is None


def test_bare_root_is_admin_index() -> None:
    message = request("/")
    assert message.command == "admin"
    assert message.sub_cmd == ""
    assert dict(message.headers) == {}


@pytest.mark.parametrize(
    ("uri", "command"),
    [
        ("/MyMQ?cmd=produce&&msgid=aed14-2343-1dea0-32&&body=xxxyyyzzz", "produce"),
        ("/MyMQ?cmd=consume&&msgid=aed14-2343-1dea0-32", "consume"),
        ("/MyMQ?cmd=request&&msgid=aed14-2343-1dea0-32", "request"),
    ],
)
def test_seed_uris(uri: str, command: str) -> None:
    message = request(uri)
    assert message.command == command
    assert message.mq == "MyMQ"
    assert message.msgid == "aed14-2343-1dea0-32"


def test_seed_uri_body_parameter() -> None:
    assert request("/MyMQ?cmd=produce&&msgid=x&&body=xxxyyyzzz").body == b"xxxyyyzzz"


# §2 query rules


def test_query_decoding_rules() -> None:
    message = request("/?&&A%20Key+=v+1%2B2&&flag&&tag=%E4%BD%A0%E5%A5%BD&tag=last&&=skipped")
    assert dict(message.headers) == {"a key": "v 1+2", "flag": "", "tag": "last"}


def test_value_split_at_first_equals() -> None:
    assert request("/?x=a=b").headers["x"] == "a=b"


def test_fragment_is_part_of_the_query() -> None:
    assert request("/q?cmd=produce&body=a#b").body == b"a#b"


def test_path_is_percent_decoded_once_without_plus() -> None:
    message = request("/My%20MQ+1?cmd=produce")
    assert message.mq == "My MQ+1"
    assert request("//double").path == "/double"


def test_headers_win_over_parameters() -> None:
    message = request("/MyMQ?cmd=consume&mq=fromurl&x=1", "cmd: produce", "mq: fromheader")
    assert message.command == "produce"
    assert message.mq == "fromheader"
    assert message.headers["x"] == "1"


def test_header_alias_wins_over_canonical_parameter() -> None:
    assert request("/?msgid=param", "id: header").msgid == "header"


def test_body_parameter_ignored_when_a_real_body_exists() -> None:
    message = request("/q?cmd=produce&body=param", body=b"real")
    assert message.body == b"real"
    assert "body" not in message.headers


def test_body_parameter_with_zero_content_length() -> None:
    message = decode(b"GET /q?body=%E4%BD%A0 HTTP/1.1\r\ncontent-length: 0\r\n\r\n")
    assert message.body == "你".encode()


def test_body_header_is_an_ordinary_header() -> None:
    message = request("/q", "body: from-header")
    assert message.body == b""
    assert message.headers["body"] == "from-header"


def test_content_length_parameter_is_dropped() -> None:
    assert "content-length" not in request("/?content-length=5").headers


def test_response_has_no_path_or_parameters() -> None:
    message = decode(b"HTTP/1.1 200 OK\r\nmq: q\r\n\r\n")
    assert message.path == ""
    assert message.command == "admin"
    assert message.mq == "q"


# §3 spellings


@pytest.mark.parametrize(
    ("header", "field", "family"),
    [
        ("msgid: a", "msgid", AliasFamily.NONE),
        ("id: a", "msgid", AliasFamily.ID),
        ("msgid_raw: a", "msgid_raw", AliasFamily.NONE),
        ("msgid-raw: a", "msgid_raw", AliasFamily.HYPHEN),
        ("rawid: a", "msgid_raw", AliasFamily.ID),
        ("mq_reply: a", "mq_reply", AliasFamily.NONE),
        ("mq-reply: a", "mq_reply", AliasFamily.HYPHEN),
        ("sub_cmd: a", "sub_cmd", AliasFamily.NONE),
        ("method: a", "sub_cmd", AliasFamily.NONE),
        ("reply_code: 201", "reply_code", AliasFamily.NONE),
        ("reply-code: 201", "reply_code", AliasFamily.NONE),
    ],
)
def test_every_spelling_is_accepted(header: str, field: str, family: AliasFamily) -> None:
    message = request("/", header)
    expected = 201 if field == "reply_code" else "a"
    assert getattr(message, field) == expected
    assert list(message.headers) == [field]
    assert message.aliases == family


def test_aliases_in_url_parameters() -> None:
    message = request("/?id=1&rawid=2&mq-reply=3&method=data&reply-code=404")
    assert (message.msgid, message.msgid_raw, message.mq_reply) == ("1", "2", "3")
    assert (message.sub_cmd, message.reply_code) == ("data", 404)
    assert message.aliases == AliasFamily.ID | AliasFamily.HYPHEN


@pytest.mark.parametrize(
    ("headers", "field", "winner"),
    [
        (["id: alias", "msgid: canon"], "msgid", "canon"),
        (["msgid: canon", "id: alias"], "msgid", "canon"),
        (["rawid: r", "msgid-raw: h", "msgid_raw: u"], "msgid_raw", "u"),
        (["rawid: r", "msgid-raw: h"], "msgid_raw", "h"),
        (["mq-reply: h", "mq_reply: u"], "mq_reply", "u"),
        (["method: m", "sub_cmd: s"], "sub_cmd", "s"),
        (["reply-code: 404", "reply_code: 500"], "reply_code", 500),
    ],
)
def test_canonical_spelling_wins(headers: list[str], field: str, winner: object) -> None:
    message = request("/", *headers)
    assert getattr(message, field) == winner
    assert len(message.headers) == 1


def test_both_families_in_one_request() -> None:
    message = request("/", "id: 1", "mq-reply: q")
    assert message.aliases == AliasFamily.ID | AliasFamily.HYPHEN
    assert dict(message.headers) == {"msgid": "1", "mq_reply": "q"}


# §4 command and MQ resolution


def test_old_form_command_in_path() -> None:
    message = request("/produce", "mq: MyMQ")
    assert message.command == "produce"
    assert message.mq == "MyMQ"


def test_empty_cmd_falls_back_to_path_then_admin() -> None:
    assert request("/consume", "cmd:").command == "consume"
    assert request("/", "cmd:").command == "admin"


# §8 ack, §9 window and topics, §13.1 fields


@pytest.mark.parametrize(
    ("value", "ack"),
    [
        (None, True),
        ("1", True),
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("0", False),
        ("false", False),
        ("yes", False),
        ("", False),
    ],
)
def test_ack_switch(value: str | None, ack: bool) -> None:
    headers = {} if value is None else {"ack": value}
    assert Message(headers=headers).ack is ack


def test_ack_value_is_trimmed() -> None:
    assert request("/", "ack:  true ").ack is True
    assert Message(headers={"ack": " 1 "}).ack is True


@pytest.mark.parametrize(
    ("value", "window"),
    [
        (None, 1),
        ("5", 5),
        ("+5", 5),
        ("-1", -1),
        ("0", 0),
        ("abc", 1),
        ("1.5", 1),
        ("-2", 1),
        ("99999999999", 1),
        ("2147483647", 2147483647),
    ],
)
def test_window(value: str | None, window: int) -> None:
    headers = {} if value is None else {"window": value}
    assert Message(headers=headers).window == window


def test_topics() -> None:
    assert request("/", "topic: a, b,,c ,").topics == ["a", "b", "c"]
    assert request("/", "topic: *").topics == ["*"]
    assert request("/").topics == []


@pytest.mark.parametrize(
    ("value", "code"), [("404", 404), ("abc", None), ("99", None), ("1000", None)]
)
def test_reply_code(value: str, code: int | None) -> None:
    assert Message(headers={"reply_code": value}).reply_code == code


def test_plain_accessors() -> None:
    message = request(
        "/", "token: t", "remote-addr: 1.2.3.4:5", "broker: b:1", "mq_reply: s", "window: 3"
    )
    assert message.token == "t"
    assert message.remote_addr == "1.2.3.4:5"
    assert message.broker == "b:1"
    assert message.mq_reply == "s"
    assert message.window == 3


def test_with_headers_sets_and_removes() -> None:
    message = Message(start=StatusLine(), headers={"token": "t", "mq": "q"}, body=b"x")
    changed = message.with_headers({"token": None, "remote-addr": "1.2.3.4:5", "mq": "r"})
    assert dict(changed.headers) == {"mq": "r", "remote-addr": "1.2.3.4:5"}
    assert dict(message.headers) == {"token": "t", "mq": "q"}
    assert changed.body == b"x"
    assert changed.start == StatusLine()


def test_default_message_is_get_root() -> None:
    assert Message().start == RequestLine("GET", "/", "HTTP/1.1")


def test_with_headers_that_change_nothing_return_the_message_itself() -> None:
    message = Message(headers={"mq": "q", "remote-addr": "a:1"}, body=b"x")
    assert message.with_headers({"token": None, "mq": "q"}) is message
    assert message.with_headers({"remote-addr": "a:1"}) is message
    assert message.with_headers({"mq": None}).headers == {"remote-addr": "a:1"}
