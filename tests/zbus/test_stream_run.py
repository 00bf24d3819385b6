"""A streaming session alone in line is dealt a batch in one run (``QueueMq._stream_run``):
what it writes, holds in flight, refuses, fails and leaves undealt is what dealing the
batch message by message makes of it (the path taken while another session waits in
line)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.engine import Delivery, encode_record
from brokers.protocols.zbus import AliasFamily, EncodeError, Message
from brokers.protocols.zbus.message import RequestLine
from brokers.servers.zbus import queue as queue_module
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.queue import PullSession, QueueMq
from brokers.servers.zbus.stored import to_engine

_KEY = ("app", "10.0.0.1")


def _deliveries(n: int) -> list[Delivery]:
    out = []
    for i in range(n):
        message = Message(
            start=RequestLine(), headers={"mq": "q", "msgid": f"p{i}"}, body=b"m%d" % i
        )
        record = encode_record(to_engine(message), app="app", now_ms=1_700_000_000_000)[0]
        out.append(Delivery(0, i, 1, record, redelivered=i % 3 == 0))
    return out


class _Spawned:
    """The context's one use while dealing: what a delivery that cannot be encoded spawns
    (its failure to the engine), recorded instead of run."""

    def __init__(self) -> None:
        self.failed: list[int] = []

    def spawn(self, failure: tuple[str, int], name: str) -> None:
        self.failed.append(failure[1])


def _deal(n: int, fail_at: int | None, close_at: int | None, held: int, other_waits: bool) -> tuple:
    """Deal ``n`` deliveries to one streaming session (``held`` already in flight on its
    connection; ``fail_at``: that delivery cannot be encoded; ``close_at``: the connection
    closes as that one is written; ``other_waits``: a session of another consumer waits
    in line, which takes the message-by-message path); what came of it, the other
    session left out."""
    written: list[bytes] = []
    conn = Connection("10.0.0.1:5", lambda data: written.append(data) or True)
    spawned = _Spawned()
    mq = QueueMq(spawned, "q")  # type: ignore[arg-type]  # dealing only spawns failures
    mq._fail = lambda app, d: (app, d.index)  # type: ignore[assignment,method-assign,return-value]
    session = PullSession(conn, "c-1", -1, AliasFamily.NONE, "app", 1.0, "10.0.0.1")
    mq.line.append(session)
    if other_waits:
        other = Connection("10.0.0.2:5", lambda data: True)
        mq.line.append(PullSession(other, "c-2", 1, AliasFamily.NONE, "b", 1.0, "10.0.0.2"))
    if held:
        mq.inflight[conn] = [queue_module.InFlight("app", 0, 99, 0.5, 0.5, True)] * held
    deliveries = _deliveries(n)
    real = queue_module.delivery_bytes

    def delivery_bytes(record: bytes, **kwargs: object) -> bytes:
        if fail_at is not None and record == deliveries[fail_at].record:
            raise EncodeError("refused")
        if close_at is not None and record == deliveries[close_at].record:
            conn.closed = True
        return real(record, **kwargs)

    unsent: list = []
    undealt: list = []
    corked: set = set()
    queue_module.delivery_bytes = delivery_bytes
    try:
        mq._deal(deliveries, _KEY, 2.0, unsent, undealt, corked)
    finally:
        queue_module.delivery_bytes = real
    for c in corked:
        c.uncork()
    return (
        b"".join(written),
        mq.inflight.get(conn),
        [(u.index, u.streaming) for u in unsent],
        [d.index for d in undealt],
        session.delivered,
        session.active,
        session in mq.line,
        conn in mq._streams,
        spawned.failed,
    )


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 6),
    fail=st.none() | st.integers(0, 5),
    close=st.none() | st.integers(0, 5),
    held=st.integers(0, 2),
)
def test_a_run_deals_what_message_by_message_dealing_deals(n, fail, close, held) -> None:
    fail_at = fail if fail is not None and fail < n else None
    close_at = close if close is not None and close < n and close != fail_at else None
    alone = _deal(n, fail_at, close_at, held, other_waits=False)
    assert alone == _deal(n, fail_at, close_at, held, True)


def test_the_run_writes_each_delivery_under_the_consume_msgid() -> None:
    data, inflight, unsent, undealt, delivered, active, in_line, streams, failed = _deal(
        3, None, None, 0, False
    )
    assert data.count(b"\r\nmsgid: c-1\r\n") == 3 and data.count(b"msgid_raw: p") == 3
    assert [i.index for i in inflight] == [0, 1, 2] and all(i.streaming for i in inflight)
    assert (unsent, undealt, delivered, active, in_line, streams) == ([], [], 3, True, True, True)
    assert failed == []
    # a connection that closes ends the session there: the rest is left for others
    _, inflight, unsent, undealt, delivered, active, in_line, _, failed = _deal(
        4, None, 1, 0, False
    )
    assert [i.index for i in inflight] == [0] and unsent == [(1, False)] and undealt == [2, 3]
    assert (delivered, active, in_line, failed) == (1, False, False, [])


def test_a_delivery_that_cannot_be_encoded_is_failed_and_the_run_goes_on() -> None:
    """Not released (due again at once, dealt straight back) nor ending the session: the
    engine retries it after its backoff, and the session takes the rest."""
    data, inflight, unsent, undealt, delivered, active, in_line, _, failed = _deal(
        4, 1, None, 0, False
    )
    assert [i.index for i in inflight] == [0, 2, 3] and failed == [1]
    assert data.count(b"msgid_raw: p") == 3 and b"msgid_raw: p1\r\n" not in data
    assert (unsent, undealt, delivered, active, in_line) == ([], [], 3, True, True)
