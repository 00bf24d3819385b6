"""The HTTP-MQ service's sans-IO pieces: parameters, envelope, addresses, relay paths."""

from __future__ import annotations

from urllib.parse import parse_qsl

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.httpmq.envelope import ProxyError, envelope, ok, raw_response
from proxy.httpmq.params import MAX_PARAMS, body_bytes, collect
from proxy.httpmq.relay import is_console_path, relayed
from proxy.httpmq.request import Request, forwarded_for

FORM = b"application/x-www-form-urlencoded"


def test_form_wins_over_query_and_last_value_wins():
    params = collect("POST", b"producer=q&keys=a&keys=b", FORM, b"producer=f&message=%E2%9C%93+x")
    assert params == {"producer": "f", "keys": "b", "message": "✓ x"}


def test_form_of_a_get_and_other_content_types_are_not_parameters():
    assert collect("GET", b"", FORM, b"producer=p") == {}
    assert collect("POST", b"", b"application/json", b'{"producer": "p"}') == {}
    assert collect("POST", b"", FORM + b"; charset=utf-8", b"a=1") == {"a": "1"}


def test_multipart_fields_count_and_file_parts_do_not():
    body = (
        b'--XX\r\nContent-Disposition: form-data; name="producer"\r\n\r\np\r\n'
        b'--XX\r\nContent-Disposition: form-data; name="f"; filename="a.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\nfile body\r\n--XX--\r\n"
    )
    assert collect("POST", b"", b"multipart/form-data; boundary=XX", body) == {"producer": "p"}
    with pytest.raises(ProxyError) as bad:
        collect("POST", b"", b"multipart/form-data", body)
    assert bad.value.status == 400


@pytest.mark.parametrize("count", [MAX_PARAMS + 1, 1_000, 100_000])
def test_too_many_fields_are_a_400(count):
    data = "&".join(f"f{i}=v" for i in range(count)).encode()
    for query, body in ((data, b""), (b"", data)):
        with pytest.raises(ProxyError) as bad:
            collect("POST", query, FORM, body)
        assert (bad.value.status, bad.value.error) == (400, "BAD_PARAMETER")


def test_bytes_that_are_not_utf8_stay_bytes_in_a_message_and_are_400_elsewhere():
    """Never U+FFFD: a message keeps the bytes it was sent; any other parameter holding
    such bytes is refused."""
    for form in (b"message=%FF%FE", b"message=\xff\xfe"):
        assert body_bytes(collect("POST", b"", FORM, form)["message"]) == b"\xff\xfe"
    with pytest.raises(ProxyError) as refused:
        collect("POST", b"", FORM, b"message=ok&keys=%C3%28")
    assert (refused.value.status, refused.value.message) == (400, "keys is not UTF-8 text")


def test_envelope_omits_nulls_and_maps_statuses():
    reply = envelope(300, message="later", error="SEND_PENDING")
    assert reply.status == 202 and reply.error == "SEND_PENDING"
    assert orjson.loads(reply.body) == {"status": 300, "message": "later", "error": "SEND_PENDING"}
    created = ok()
    assert created.status == 200 and orjson.loads(created.body) == {"status": 201}
    assert envelope(200, error="IGNORED").error is None  # no error code below 300
    assert (b"access-control-allow-origin", b"*") in created.headers


def test_raw_response_is_a_complete_closing_http_response():
    raw = raw_response(envelope(408, message="slow", error="TIMEOUT"))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b"connection: close" in head and b"content-length: %d" % len(body) in head
    assert orjson.loads(body)["error"] == "TIMEOUT"


def test_forwarding_headers_count_only_from_trusted_proxies():
    headers = {b"x-forwarded-for": b"10.1.2.3, 10.0.0.1", b"x-real-ip": b"10.9.9.9"}
    assert forwarded_for(headers, "127.0.0.1", frozenset()) == "127.0.0.1"
    assert forwarded_for(headers, "127.0.0.1", {"127.0.0.1"}) == "10.1.2.3"
    assert forwarded_for({b"x-real-ip": b"10.9.9.9"}, "127.0.0.1", {"127.0.0.1"}) == "10.9.9.9"
    assert forwarded_for({}, "127.0.0.1", {"127.0.0.1"}) == "127.0.0.1"


def test_client_ip_is_recorded_but_bounded():
    request = Request("GET", "/mq/message", {}, {"clientIp": "10.0.0.7"}, "1.2.3.4", "1.2.3.4")
    assert request.client_ip() == "10.0.0.7" and request.peer_address == "1.2.3.4"
    request.params["clientIp"] = "x" * 65
    with pytest.raises(ProxyError):
        request.client_ip()


def test_cookie_values_with_or_without_quotes():
    request = Request("GET", "/", {b"cookie": b'a=1; rid="YWI="; b=2'}, {}, "", "")
    assert request.cookie("rid") == "YWI=" and request.cookie("b") == "2"
    assert request.cookie("missing") == ""


@pytest.mark.parametrize(
    ("path", "console"),
    [
        ("/mq/config/demo-app.demo", True),
        ("/mq/config/", False),
        ("/mq/config/a/b", False),
        ("/mq/consumer/config", True),
        ("/mq/unregister", True),
        ("/mq/clustering/queue/offset", True),
        ("/mq/broadcast/queue/offset", True),
        ("/mq/produce", False),
    ],
)
def test_console_paths(path, console):
    assert is_console_path(path) is console


def test_relayed_envelopes_pass_and_pages_become_envelopes():
    passed = relayed(403, "application/json", b'{"status":403,"error":"FORBIDDEN"}')
    assert passed.status == 403 and passed.body == b'{"status":403,"error":"FORBIDDEN"}'
    assert (b"content-type", b"application/json") in passed.headers
    for status, code in ((400, "BAD_PARAMETER"), (404, "NOT_FOUND"), (500, "INTERNAL_ERROR")):
        page = relayed(status, "text/html; charset=utf-8", b"<html>Bad Request</html>")
        assert page.status == status and orjson.loads(page.body)["error"] == code
    for status in (302, 502):
        odd = relayed(status, "text/html", b"")
        assert odd.status == 503 and orjson.loads(odd.body)["error"] == "UNAVAILABLE"
    busy = relayed(503, "application/json", b'{"status":503,"error":"UNAVAILABLE"}', "1")
    assert (b"retry-after", b"1") in busy.headers  # §1: a 503 carries Retry-After
    odd_value = relayed(503, "application/json", b"{}", "1\r\nSet-Cookie: x")
    assert not any(name == b"retry-after" for name, _ in odd_value.headers)


def _has_escaped_bytes(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(alphabet="ab=&%+2F0Ez\u00e9 ;", max_size=12).map(lambda t: t.encode("utf-8"))
        | st.binary(max_size=12),
        max_size=6,
    )
)
def test_urlencoded_fields_parse_as_urllib_parses_them(pieces: list[bytes]) -> None:
    """The query/form parser agrees with urllib's parse_qsl (blank values kept, the last
    of a repeated name wins) on any bytes, escapes and separators included."""
    data = b"&".join(pieces)
    text = data.decode("latin-1") if data.isascii() else data.decode("utf-8", "surrogateescape")
    expected = dict(parse_qsl(text, keep_blank_values=True, errors="surrogateescape"))
    if len(expected) > MAX_PARAMS:
        return
    escaped = [v for k, v in expected.items() if k != "message" and _has_escaped_bytes(v)]
    if escaped:
        with pytest.raises(ProxyError):  # bytes that are not UTF-8 outside a message
            collect("GET", data, FORM, b"")
        return
    assert collect("GET", data, FORM, b"") == expected
