"""The HTTP-MQ service as a public HTTP service: limits, timeouts, bounded connections, the
envelope on every failure, keep-alive, health and metrics, access log, several processes.

Most tests talk raw bytes to a service started with tight limits (1 s header and body
timeouts, 1 MiB bodies, 500 connections, access log on), so each failure mode is seen as a
client on the wire sees it; after each, the service must still serve.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from brokers.servers.protocol_errors import BURST
from tests.httpmq.conftest import ROOT, make_catalog, start_proxy, stop, wait_known
from tests.scripts_path import free_port, wait_for_port

pytestmark = pytest.mark.django_db

LIMITS = {
    "HTTPMQ_HEADER_TIMEOUT_SECONDS": "1",
    "HTTPMQ_BODY_TIMEOUT_SECONDS": "1",
    "HTTPMQ_MAX_BODY_BYTES": str(1024 * 1024),
    "HTTPMQ_MAX_HEADER_BYTES": str(16 * 1024),
    "HTTPMQ_MAX_CONNECTIONS": "500",
    "HTTPMQ_ACCESS_LOG": "true",
}


@pytest.fixture(scope="module")
def limited(django_db_setup, tmp_path_factory) -> Iterator[tuple[int, Path]]:
    """(port, log file) of a service with the tight :data:`LIMITS`."""
    from tests.redis_fixtures import require_test_session

    require_test_session()
    port = free_port()
    log = tmp_path_factory.mktemp("limited") / "proxy.log"
    proc = start_proxy(port, log, **LIMITS)
    yield port, log
    stop(proc)


@pytest.fixture
def port(limited) -> int:
    return limited[0]


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_response(sock: socket.socket, timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
    """One HTTP response: status, headers (lower-case names) and body."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """True when the server closes the connection within ``within`` seconds."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
        return True
    except (TimeoutError, BlockingIOError):
        return False
    except ConnectionResetError:
        return True


def assert_envelope(body: bytes, status: int, error: str) -> None:
    doc = orjson.loads(body)
    assert doc["status"] == status and doc["error"] == error and doc["message"], doc


def serves(port: int) -> None:
    r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    assert r.status_code == 200 and r.json()["result"]["redis"] == "ok"


# ---------------------------------------------------------------------- sizes


def test_oversized_body_is_refused_before_it_is_read(port):
    sock = connect(port)
    sock.sendall(
        b"POST /mq/produce HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded"
        b"\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 1024
    )  # 1 KiB of the announced 100 MB: the answer must not wait for the rest
    status, headers, body = read_response(sock, timeout=3)
    assert status == 413 and headers["connection"] == "close"
    assert_envelope(body, 413, "MESSAGE_TOO_LARGE")
    assert closed_by_server(sock, 3)
    serves(port)


def test_chunked_body_is_cut_off_at_the_limit(port):
    sock = connect(port)
    sock.sendall(
        b"POST /mq/produce HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
    )
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
    with contextlib.suppress(OSError):  # the server may close while we still send
        for _ in range(40):  # 2.5 MiB, over the 1 MiB limit
            sock.sendall(chunk)
    status, _, body = read_response(sock)
    assert status == 413
    assert_envelope(body, 413, "MESSAGE_TOO_LARGE")
    serves(port)


def test_oversized_headers_are_431(port):
    sock = connect(port)
    sock.sendall(b"GET /mq/message HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n")
    status, _, body = read_response(sock)
    assert status == 431
    assert_envelope(body, 431, "BAD_REQUEST")
    serves(port)


def test_a_thousand_form_fields_are_a_400_not_a_500(port):
    s = make_catalog(partitions=1)
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=10) as client:
        wait_known(client, s, producer_only=True)
        fields = {f"f{i}": "v" for i in range(1500)} | {"producer": s.producer, "message": "m"}
        r = client.post("/mq/produce", data=fields, headers={"Authorization": f"Bearer {s.token}"})
        assert r.status_code == 400 and r.json()["error"] == "BAD_PARAMETER"
        query = "&".join(f"q{i}=1" for i in range(1500))
        r = client.get(f"/mq/message?{query}")
        assert r.status_code == 400 and r.json()["error"] == "BAD_PARAMETER"
        same = "&".join(["producer=" + s.producer] * 1200) + "&message=m"  # one name, many times
        r = client.post(
            "/mq/produce",
            content=same,
            headers={
                "Authorization": f"Bearer {s.token}",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        assert r.status_code == 400 and r.json()["error"] == "BAD_PARAMETER"
    serves(port)


# ---------------------------------------------------------------------- slow and silent clients


def test_silent_connection_is_dropped(port):
    sock = connect(port)
    started = time.monotonic()
    assert closed_by_server(sock, 5)
    assert 0.8 < time.monotonic() - started < 4


def test_half_sent_headers_get_408_then_close(port):
    sock = connect(port)
    sock.sendall(b"POST /mq/produce HTTP/1.1\r\nHost: x\r\nContent-")
    started = time.monotonic()
    status, _, body = read_response(sock, timeout=5)
    assert status == 408 and 0.8 < time.monotonic() - started < 4
    assert_envelope(body, 408, "TIMEOUT")
    assert closed_by_server(sock, 2)
    serves(port)


def test_half_sent_body_gets_408_then_close(port):
    sock = connect(port)
    sock.sendall(
        b"POST /mq/produce HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n\r\nproducer=p"
    )
    status, _, body = read_response(sock, timeout=5)
    assert status == 408
    assert_envelope(body, 408, "TIMEOUT")
    assert closed_by_server(sock, 2)
    serves(port)


def test_keep_alive_serves_many_requests_on_one_connection(port):
    sock = connect(port)
    for _ in range(3):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, _ = read_response(sock)
        assert status == 200 and headers.get("connection") != "close"
    assert not closed_by_server(sock, 0.3)  # idle, within the keep-alive timeout
    sock.close()


# ---------------------------------------------------------------------- connections


def test_two_thousand_idle_connections_do_not_stop_service(port):
    idle = []
    try:
        for _ in range(2000):
            idle.append(connect(port))
        started = time.monotonic()
        serves(port)  # a newcomer is served at once: the longest-idle connections made room
        assert time.monotonic() - started < 2
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        open_now = float(re.search(r"^mqcloud_httpmq_connections (\S+)", metrics, re.M)[1])
        assert open_now <= 501  # HTTPMQ_MAX_CONNECTIONS, and the scrape's own connection
        dropped = sum(closed_by_server(sock, 0.001) for sock in idle)
        assert dropped >= 1400
    finally:
        for sock in idle:
            sock.close()
    serves(port)


def test_the_longest_idle_connection_makes_room(port):
    sock = connect(port)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(sock)[0] == 200
    others = [connect(port) for _ in range(600)]
    try:
        assert closed_by_server(sock, 1)  # idle the longest: closed for a newcomer
        serves(port)
    finally:
        for other in others:
            other.close()


def test_a_connection_sending_its_request_is_never_evicted(port):
    """Only connections between requests (or not started) are idle; one in the middle of
    sending a body keeps its place however many connections arrive."""
    body = b"producer=nobody&message=m"
    busy = connect(port)
    busy.sendall(
        b"POST /mq/produce HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n\r\n%s" % (len(body), body[:5])
    )
    others = [connect(port) for _ in range(600)]
    try:
        busy.sendall(body[5:])
        status, _, answer = read_response(busy)
        assert status == 401  # answered, after the whole body, as any request without a token
        assert_envelope(answer, 401, "UNAUTHENTICATED")
    finally:
        for other in others:
            other.close()


# ---------------------------------------------------------------------- the envelope everywhere


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"\x00\x01\x02\x03\xff\xfe\r\n\r\n",
        b"GET /mq/message HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET /mq/message HTTP/1.1\r\nBad Header Name: x\r\n\r\n",
        b"POST /mq/produce HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST /mq/produce HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"POST /mq/produce HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n",
    ],
)
def test_malformed_requests_get_the_envelope(port, raw):
    sock = connect(port)
    sock.sendall(raw)
    status, headers, body = read_response(sock)
    assert status == 400 and headers["content-type"] == "application/json"
    assert_envelope(body, 400, "BAD_REQUEST")
    assert closed_by_server(sock, 2)
    serves(port)


def test_a_flood_of_malformed_requests_is_counted_and_logged_by_sample(limited):
    """uvicorn logs a warning per unparsable request; 500 of them write at most a burst."""
    port, log = limited
    before = len(log.read_text().splitlines())
    for _ in range(500):
        sock = connect(port)
        sock.sendall(b"NOT A REQUEST LINE\r\n\r\n")
        assert read_response(sock)[0] == 400
        sock.close()
    serves(port)
    time.sleep(0.2)
    logged = [line for line in log.read_text().splitlines()[before:] if "Invalid HTTP" in line]
    assert len(logged) <= BURST
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    counted = re.search(
        r'^mqcloud_httpmq_protocol_errors_total\{kind="malformed"\} (\S+)', metrics, re.M
    )
    assert counted and float(counted[1]) >= 500


def test_unknown_paths_and_methods_get_the_envelope(port):
    base = f"http://127.0.0.1:{port}"
    for path in ("/", "/mq/", "/mq/nope", "/favicon.ico", "/mq/produce/", "/mq/config/"):
        r = httpx.get(base + path, timeout=5)
        assert r.status_code == 404 and r.headers["content-type"] == "application/json", path
        assert_envelope(r.content, 404, "NOT_FOUND")
    for method in ("PUT", "DELETE", "PATCH"):
        r = httpx.request(method, base + "/mq/produce", timeout=5)
        assert r.status_code == 405
        assert_envelope(r.content, 405, "BAD_PARAMETER")
    preflight = httpx.options(base + "/mq/message", timeout=5)
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"


def test_upgrade_requests_are_answered_as_plain_http(port, limited):
    sock = connect(port)
    sock.sendall(
        b"GET /mq/produce HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
        b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    status, headers, body = read_response(sock)
    assert status == 400 and headers["content-type"] == "application/json"
    assert_envelope(body, 400, "BAD_PARAMETER")  # no producer: answered, not upgraded
    assert "Unsupported upgrade" not in limited[1].read_text()
    serves(port)


def test_console_endpoints_answer_503_when_the_console_is_unreachable(port):
    r = httpx.get(f"http://127.0.0.1:{port}/mq/config/someone", timeout=10)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert_envelope(r.content, 503, "UNAVAILABLE")


# ---------------------------------------------------------------------- forms, health, metrics, log


def test_multipart_form_produce(port):
    s = make_catalog(partitions=1)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        wait_known(client, s, producer_only=True)
        r = client.post(
            "/mq/produce",
            data={"producer": s.producer, "message": "from a form"},
            files={"ignored": ("a.txt", b"file parts are not parameters")},
            headers={"Authorization": f"Bearer {s.token}"},
        )
        assert r.status_code == 200, r.text
        body = client.get(
            "/mq/message",
            params={"topic": s.topic, "consumer": s.consumer},
            headers={"Authorization": f"Bearer {s.token}"},
        ).json()["result"]
        assert [m["message"] for m in body["msgList"]] == ["from a form"]


def test_metrics_count_requests_latency_and_errors(port):
    base = f"http://127.0.0.1:{port}"
    httpx.get(base + "/mq/message", timeout=5)  # 400: no consumer
    text = httpx.get(base + "/metrics", timeout=5).text
    assert re.search(r'mqcloud_httpmq_requests_total\{endpoint="message",status="400"\} \d', text)
    assert 'mqcloud_httpmq_request_seconds_bucket{endpoint="message",le="0.01"}' in text
    assert 'mqcloud_httpmq_errors_total{endpoint="message",error="BAD_PARAMETER"}' in text


def test_access_log_is_on_by_setting_and_never_shows_tokens(limited):
    port, log = limited
    httpx.get(
        f"http://127.0.0.1:{port}/mq/message",
        params={"token": "secret-token-in-query", "consumer": "c", "topic": "t"},
        headers={"Authorization": "Bearer secret-token-in-header"},
        timeout=5,
    )
    time.sleep(0.2)
    text = log.read_text()
    assert '"GET /mq/message" 401' in text
    assert "secret-token" not in text


def test_access_log_is_off_by_default(mq_urls, tmp_path_factory):
    httpx.get(mq_urls[0] + "/mq/message", timeout=5)
    logs = Path(tmp_path_factory.getbasetemp()).glob("httpmq*/proxy-0.log")
    assert all('"GET /mq/message"' not in log.read_text() for log in logs)


# ---------------------------------------------------------------------- processes


def test_several_processes_share_one_port(tmp_path):
    from tests.redis_fixtures import require_test_session

    require_test_session()
    port = free_port()
    with (tmp_path / "proxy.log").open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runproxy", "--port", str(port), "--processes", "2"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, timeout=30)
        deadline = time.monotonic() + 30
        served = 0
        while served < 20 and time.monotonic() < deadline:  # a new connection each time
            with contextlib.suppress(httpx.TransportError):
                served += httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).is_success
        assert served == 20
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        total = re.search(r'requests_total\{endpoint="healthz",status="200"\} (\S+)', text)
        assert total and float(total[1]) == 20  # both processes' figures, whichever answers
    finally:
        stop(proc)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
