"""The real 2015 zbus Java client still works on MQs it creates (zbus.md §8–§10, §13.3a).

``java/ZbusClient2015.java`` uses only the client API of the zbus 5.1 jar beside the checkout
(``../shared/peers/zbus-5.1/``), with no token at all: its consumers and its RPC worker create
their MQs (a consume answered 404 makes ``Consumer.recv`` send ``create_mq``), it produces
and consumes a queue, makes one request/reply round trip and subscribes to a pub/sub MQ. The
same client producing to and consuming a catalog topic that is closed to token-less clients
gets the 403 back, and nothing is stored. The program is compiled with ``javac`` at test
time and run against the in-process zbus server; it prints ``ZB <key> <field=value>...``
lines.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from brokers import anonymous
from brokers.catalog_loader import publish
from brokers.models import Broker, Team, Topic
from tests import factories

REPOSITORY = Path(__file__).resolve().parents[2]
JAR = REPOSITORY / ".." / "shared" / "peers" / "zbus-5.1" / "zbus-5.1.0-SNAPSHOT.jar"
"""The peer's jar beside the checkout (its README: ``../shared/peers/zbus-5.1/``)."""
SOURCE = Path(__file__).with_name("java") / "ZbusClient2015.java"
JAVA, JAVAC = shutil.which("java"), shutil.which("javac")
TIMEOUT = 60.0
"""Seconds each of javac and the client may take before they are killed."""

QUEUE, SERVICE, PUBSUB, CLOSED = "j2015-orders", "j2015-echo", "j2015-news", "console-ledger"
BODIES = [
    b"first",
    "zwei \u00fcber \u4e2d\u6587 \U0001f600".encode(),
    b"line1\r\n\r\nline3: not a header\r\ncontent-length: 3\r\n",
    bytes(range(256)),
    bytes((i * 7 + i // 256) % 256 for i in range(100_000)),
]
RPC_REQUEST = "ping-\u00e9\u4e2d".encode()

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not JAR.is_file(), reason=f"the zbus 5.1 jar is absent: {JAR}"),
    pytest.mark.skipif(
        not (JAVA and JAVAC),
        reason="java and javac not on PATH (scripts/bootstrap.sh installs openjdk-17-jdk-headless)",
    ),
]


@pytest.fixture
def closed_topic(catalog) -> str:
    """A topic made as the console makes one: in the catalog, not opened to token-less
    clients (no ``open_topic``)."""
    cluster = Broker.objects.get(id=1).cluster
    topic = factories.topic(CLOSED, cluster, Team.objects.get(name="team1"), 1, 1)
    assert topic.zbus_mode == 1 and not anonymous.is_open(topic)
    publish()
    return CLOSED


async def run(*command: str) -> str:
    """Run ``command`` (bounded; killed on timeout) and return its stdout; fail on non-zero."""
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(
            f"{Path(command[0]).name} killed after {TIMEOUT} s\n{out.decode()}\n{err.decode()}"
        )
    assert proc.returncode == 0, (
        f"{Path(command[0]).name} exited {proc.returncode}\n{out.decode()}\n{err.decode()}"
    )
    return out.decode()


def parse(out: str) -> dict[str, list[dict[str, str]]]:
    """``ZB key a=1 b=2`` lines, grouped by key in order."""
    results: dict[str, list[dict[str, str]]] = {}
    for line in out.splitlines():
        if line.startswith("ZB "):
            key, *fields = line[3:].split(" ")
            results.setdefault(key, []).append(dict(f.split("=", 1) for f in fields))
    return results


def unhex(value: str) -> bytes:
    return b"" if value == "-" else bytes.fromhex(value)


def _catalog_rows() -> dict[str, tuple[int, str, str, bool]]:
    try:
        return {
            t.code: (t.zbus_mode, t.team.name, t.creator, anonymous.is_open(t))
            for t in Topic.objects.select_related("team")
        }
    finally:
        connection.close()


async def test_2015_java_client_on_mqs_it_creates(closed_topic, broker, tmp_path) -> None:
    for _ in range(100):  # the watcher has the closed topic (published before it started)
        if closed_topic in broker.watcher.current.topics:
            break
        await asyncio.sleep(0.05)
    classes = tmp_path / "classes"
    await run(
        JAVAC, "-encoding", "UTF-8", "-nowarn", "-cp", str(JAR), "-d", str(classes), str(SOURCE)
    )
    bodies = tmp_path / "bodies.hex"
    bodies.write_text("".join(body.hex() + "\n" for body in BODIES))
    started_ms = time.time() * 1000
    out = await run(
        JAVA,
        "-cp",
        f"{JAR}{os.pathsep}{classes}",
        "ZbusClient2015",
        f"127.0.0.1:{broker.port}",
        QUEUE,
        SERVICE,
        PUBSUB,
        closed_topic,
        str(bodies),
    )
    print("\n".join(line[:300] for line in out.splitlines()))  # shown when the test fails
    got = parse(out)
    assert got["done"] == [{}]

    # Queue: every produce acked with the broker's time; consumed back intact, FIFO, once.
    acks = got["queue.ack"]
    assert [(a["seq"], a["status"]) for a in acks] == [(str(i), "200") for i in range(len(BODIES))]
    assert all(
        started_ms - 1000 <= int(unhex(a["body"])) <= time.time() * 1000 + 1000 for a in acks
    )
    received = got["queue.recv"]
    assert [unhex(r["body"]) for r in received] == BODIES
    assert [(r["status"], r["seq"], r["redelivered"]) for r in received] == [
        ("200", str(i), "-") for i in range(len(BODIES))
    ]
    assert all(r["msgid"] != "-" and r["msgid_raw"] != "-" for r in received)
    assert got["queue.after"] == [{"status": "none", "body": "-"}]  # nothing more, no duplicate

    # RPC: the worker got the request with ack off and a reply queue; the caller the reply.
    (worker,) = got["rpc.worker"]
    assert (worker["ack"], worker["mq_reply_set"], unhex(worker["body"])) == (
        "0",
        "true",
        RPC_REQUEST,
    )
    assert worker["msgid_raw"] != "-"
    (reply,) = got["rpc.reply"]
    assert (reply["status"], unhex(reply["body"])) == ("200", b"echo:" + RPC_REQUEST)

    # Pub/sub: only the subscribed topic, in order.
    assert got["pubsub.subscribed"][0]["ok"] == "true"
    assert [a["status"] for a in got["pubsub.ack"]] == ["200"] * 4
    assert [(r["status"], r["topic"], unhex(r["body"])) for r in got["pubsub.recv"]] == [
        ("200", "sports", b"s1"),
        ("200", "sports", b"s2"),
        ("200", "sports", b"s3"),
    ]

    # The MQs the client created: in the catalog, zbus team, open, created by the client;
    # the RPC reply queue is a Temp MQ, not a topic.
    rows = await sync_to_async(_catalog_rows)()
    assert {code for code, row in rows.items() if row[1] == "zbus"} == {QUEUE, SERVICE, PUBSUB}
    for code, mode in ((QUEUE, 1), (SERVICE, 1), (PUBSUB, 2)):
        zbus_mode, team, creator, is_open = rows[code]
        assert (zbus_mode, team, is_open) == (mode, "zbus", True), code
        assert creator.startswith("127.0.0.1:"), code

    # The closed topic: both refused with the 403 the client surfaces; nothing stored.
    (produced,) = got["closed.produce"]
    (consumed,) = got["closed.consume"]
    refusal = f"MQ({CLOSED}) forbbiden, token() mismatched".encode()  # it sends "token: "
    assert (produced["status"], unhex(produced["body"])) == ("403", refusal)
    assert (consumed["status"], unhex(consumed["body"])) == ("403", refusal)
    assert rows[CLOSED][3] is False  # still closed: the client sent no create_mq for it
    stats = await broker.engine.queue_stats(CLOSED)
    assert (stats.backlog, stats.in_flight, stats.retrying, stats.stored) == (0, 0, 0, 0)

    # The consumed queue is empty once the client's connections are gone.
    for _ in range(100):
        stats = await broker.engine.queue_stats(QUEUE)
        if stats.in_flight == 0:
            break
        await asyncio.sleep(0.05)
    assert (stats.ready, stats.in_flight) == (0, 0)
