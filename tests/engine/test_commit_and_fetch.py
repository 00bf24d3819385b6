"""HTTP-MQ's request in one engine call: commit, fetch and resends as the three calls
would do them one after the other (single Redis: one script; cluster: separate calls)."""

from __future__ import annotations

from brokers.engine import CommitRequest, CommitStatus, FetchStatus, Message, resend
from brokers.engine.record import decode_record
from brokers.engine.resend import READ_TOGETHER
from tests.engine.conftest import snapshot


async def produce(engine, partition: int, n: int) -> None:
    await engine.append(
        "t", "a", [Message(f"m{i}".encode()) for i in range(n)], partition=partition
    )


def commit_of(fetched) -> CommitRequest:
    return CommitRequest(fetched.partition, fetched.start, fetched.end, fetched.lock_token)


async def test_it_does_what_commit_fetch_and_take_resends_do(make_engine):
    """Two consumer groups on the same data, one served by the three calls, the other by
    commit_and_fetch: the same batches, commits, positions and resends, request by request."""
    snap = snapshot(
        topics={"t": {"partitions": 3}},
        consumers=[
            {"topic": "t", "app": "a", "batch_size": 4},
            {"topic": "t", "app": "b", "batch_size": 4},
        ],
    )
    apart, together = make_engine(snap), make_engine(snap)
    for p, n in ((0, 9), (1, 5), (2, 2)):
        await produce(apart, p, n)
    await apart.add_resend("t", "a", [(1, 3), (0, 0)])
    await apart.add_resend("t", "b", [(1, 3), (0, 0)])
    prev_a = prev_b = None
    for _ in range(7):
        committed_a = None
        if prev_a is not None:
            committed_a = await apart.commit(
                "t", "a", prev_a.partition, offset=prev_a.start, next_offset=prev_a.end,
                lock_time=prev_a.lock_token,
            )  # fmt: skip
        got_a = await apart.fetch("t", "a", owner="o")
        resends_a = await apart.take_resends("t", "a")
        pulled = await together.commit_and_fetch(
            "t", "b", commit=commit_of(prev_b) if prev_b is not None else None, owner="o"
        )
        got_b = pulled.fetched
        assert pulled.commit == committed_a
        assert (got_b.status, got_b.partition, got_b.start, got_b.end) == (
            got_a.status, got_a.partition, got_a.start, got_a.end
        )  # fmt: skip
        assert [(d.index, d.record) for d in got_b.messages] == [
            (d.index, d.record) for d in got_a.messages
        ]
        assert (got_b.ack_index, got_b.max_index, got_b.first_consume) == (
            got_a.ack_index, got_a.max_index, got_a.first_consume
        )  # fmt: skip
        assert [(d.partition, d.index) for d in pulled.resends] == [
            (d.partition, d.index) for d in resends_a
        ]
        prev_a = got_a if got_a.lock_token else None
        prev_b = got_b if got_b.lock_token else None
    progress_a = await apart.progress("t", "a")
    progress_b = await together.progress("t", "b")
    assert [r.ack_index for r in progress_a] == [r.ack_index for r in progress_b] == [9, 5, 2]


async def test_resends_wait_while_every_partition_with_messages_is_locked(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 3)
    held = await engine.fetch("t", "a", owner="other")
    await engine.add_resend("t", "a", [(0, 1)])
    pulled = await engine.commit_and_fetch("t", "a", commit=None, owner="me")
    assert pulled.fetched.status is FetchStatus.NO_PARTITION and pulled.resends == ()
    await engine.commit(
        "t", "a", 0, offset=held.start, next_offset=held.end, lock_time=held.lock_token
    )
    pulled = await engine.commit_and_fetch("t", "a", commit=None, owner="me")
    assert [d.index for d in pulled.resends] == [1]


async def test_a_rejected_commit_is_reported_and_the_fetch_goes_on(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 2)
    pulled = await engine.commit_and_fetch(
        "t", "a", commit=CommitRequest(partition=7, offset=0, next_offset=1, lock_time=1)
    )
    assert pulled.commit is None and "no partition 7" in (pulled.commit_error or "")
    assert pulled.fetched.status is FetchStatus.FOUND
    bad = await engine.commit_and_fetch(
        "t", "a", commit=CommitRequest(partition=0, offset=2, next_offset=1, lock_time=1)
    )
    assert bad.commit is None and "ack illegal" in (bad.commit_error or "")


async def test_a_paused_consumer_still_commits(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 4)
    got = await engine.fetch("t", "a", count=2)
    engine.set_snapshot(
        snapshot(
            topics={"t": {"partitions": 1}}, consumers=[{"topic": "t", "app": "a", "paused": True}]
        )
    )
    pulled = await engine.commit_and_fetch("t", "a", commit=commit_of(got))
    assert pulled.fetched.status is FetchStatus.PAUSED
    assert pulled.commit is not None and pulled.commit.status is CommitStatus.OK
    assert [r.ack_index for r in await engine.progress("t", "a")] == [2]


async def test_many_resends_come_in_queued_order_and_trimmed_ones_are_skipped(make_engine):
    """More resends than are read together (``READ_TOGETHER``), across partitions, with
    entries no longer stored among them: the stored ones are handed out once each, in the
    order they were queued."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 2}}))
    await produce(engine, 0, 12)
    await produce(engine, 1, 12)
    queued = [(i % 2, i // 2) for i in range(24)][::-1]
    queued[5:5] = [(0, 40)]  # past the end of partition 0
    queued[17:17] = [(1, 90)]
    assert READ_TOGETHER < len(queued) <= 32
    await engine.add_resend("t", "a", queued)
    pulled = await engine.commit_and_fetch("t", "a", commit=None, owner="me", resends=32)
    want = [e for e in queued if e[1] < 12]
    assert [(d.partition, d.index) for d in pulled.resends] == want
    assert [decode_record(d.record).body for d in pulled.resends] == [
        f"m{i}".encode() for _, i in want
    ]
    again = await engine.commit_and_fetch("t", "a", commit=None, owner="me")
    assert again.resends == ()


async def test_resends_are_read_together_not_one_round_trip_each(make_engine, monkeypatch):
    """The records of popped resends are read ``READ_TOGETHER`` at a time: a fetch handing
    out 32 waits for 4 rounds of reads, not 32 one after the other."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 32)
    await engine.add_resend("t", "a", [(0, i) for i in range(32)])
    reading, most = 0, 0

    async def counted(*args, **kwargs):
        nonlocal reading, most
        reading += 1
        most = max(most, reading)
        try:
            return await real(*args, **kwargs)
        finally:
            reading -= 1

    real = resend.read_range
    monkeypatch.setattr(resend, "read_range", counted)
    pulled = await engine.commit_and_fetch("t", "a", commit=None, owner="me", resends=32)
    assert [d.index for d in pulled.resends] == list(range(32))
    assert most == READ_TOGETHER
