"""An ack index found outside its partition (retention took what the consumer had not
acked, or it was committed past the end) is moved to the nearest position kept. HTTP-MQ's
request (:meth:`Engine.commit_and_fetch`) reports the move — CORRECTED, the partition
locked over nothing, so the client confirms it with a forceAck (http-mq.md
OFFSET_ILLEGAL) — and reads nothing under that lock: nothing counts as consumed, nor as
failed when the client never confirms. A plain fetch (JMQ4) moves on silently and reads.
Both store paths: one script over every partition, or the partitions one by one."""

from __future__ import annotations

from brokers.engine import CommitRequest, CommitStatus, FetchStatus, Message
from brokers.engine.keys import PartitionKeys, consumer_id
from tests.engine.conftest import snapshot


def catalog(partitions: int = 1):
    return snapshot(
        topics={"t": {"partitions": partitions, "retention_max_count": 2}},
        consumers=[{"topic": "t", "app": "a", "start_position": "earliest"}],
    )


async def produce(engine, n: int, partition: int = 0) -> None:
    for i in range(n):  # one entry each: retention cuts exactly
        await engine.append("t", "a", [Message(b"m%d" % i)], partition=partition)


async def overtaken(engine) -> None:
    """The consumer acked 0 of 0..4, retention kept 3 and 4 (min 3, end 5)."""
    await produce(engine, 5)
    got = await engine.fetch("t", "a", count=1, owner="o")
    await engine.commit("t", "a", 0, offset=0, next_offset=1, lock_time=got.lock_token)
    assert (await engine.trim("t"))[0] == 3


async def failures(engine) -> int:
    return (await engine.consume_failures([("t", "a")])).get(("t", "a"), 0)


async def test_an_overtaken_offset_is_reported_locked_over_nothing(make_engine, clock):
    engine = make_engine(catalog())
    await overtaken(engine)
    pulled = await engine.commit_and_fetch("t", "a", commit=None, owner="o")
    got = pulled.fetched
    assert got.status is FetchStatus.CORRECTED and not got.found
    assert (got.corrected_from, got.ack_index, got.start, got.end) == (1, 3, 3, 3)
    assert got.messages == () and got.lock_token > 0
    # another client finds the partition locked until the move is confirmed
    other = await engine.commit_and_fetch("t", "a", commit=None, owner="o2")
    assert other.fetched.status is FetchStatus.NO_PARTITION
    confirm = CommitRequest(0, got.corrected_from, got.ack_index, got.lock_token, force=True)
    after = await engine.commit_and_fetch("t", "a", commit=confirm, owner="o")
    assert after.commit is not None and after.commit.status is CommitStatus.OK
    assert after.fetched.status is FetchStatus.FOUND
    assert [d.index for d in after.fetched.messages] == [3, 4]
    assert await failures(engine) == 0


async def test_an_unconfirmed_correction_is_no_failure_and_reads_on(make_engine, clock):
    """The client never returns the forceAck requestId: its lock runs out over an empty
    range — nothing was handed out, so nothing counts as failed — and the next request
    reads from the corrected position (the move is stored already)."""
    engine = make_engine(catalog())
    await overtaken(engine)
    got = (await engine.commit_and_fetch("t", "a", commit=None, owner="o")).fetched
    assert got.status is FetchStatus.CORRECTED
    clock.advance(400)  # past the ack timeout
    again = (await engine.commit_and_fetch("t", "a", commit=None, owner="o2")).fetched
    assert again.status is FetchStatus.FOUND and again.corrected_from == -1
    assert [d.index for d in again.messages] == [3, 4]
    assert await failures(engine) == 0


async def test_a_plain_fetch_moves_on_silently(make_engine):
    engine = make_engine(catalog())
    await overtaken(engine)
    got = await engine.fetch("t", "a", owner="o")
    assert got.status is FetchStatus.FOUND and got.corrected_from == 1
    assert [d.index for d in got.messages] == [3, 4]


async def test_a_correction_is_reported_before_other_partitions_backlog(make_engine):
    engine = make_engine(catalog(partitions=2))
    await overtaken(engine)
    await produce(engine, 2, partition=1)  # a backlog elsewhere, inside its range
    got = (await engine.commit_and_fetch("t", "a", commit=None, owner="o")).fetched
    assert (got.status, got.partition) == (FetchStatus.CORRECTED, 0)


async def test_an_offset_past_the_end_or_in_a_drained_partition_is_reported(
    make_engine, store, clock
):
    """Past the end (a partition written anew), and below a partition retention emptied
    (nothing left to read): both were moved silently before, so the client never heard."""
    engine = make_engine(catalog())
    await produce(engine, 2)
    keys = PartitionKeys("t", 0)
    state = keys.state(consumer_id("a", None))
    await store.hset(state, "ack", 7)
    got = (await engine.commit_and_fetch("t", "a", commit=None, owner="o")).fetched
    assert (got.status, got.corrected_from, got.ack_index) == (FetchStatus.CORRECTED, 7, 2)
    done = await engine.commit(
        "t", "a", 0, offset=7, next_offset=2, lock_time=got.lock_token, force=True
    )
    assert (done.status, done.committed) == (CommitStatus.OK, 2)
    await store.hset(state, "ack", 1)
    await store.hset(keys.meta, "min", 2)  # retention took 0 and 1: nothing is left
    got = (await engine.commit_and_fetch("t", "a", commit=None, owner="o")).fetched
    assert (got.status, got.corrected_from, got.ack_index) == (FetchStatus.CORRECTED, 1, 2)
    clock.advance(400)  # past the ack timeout
    assert (await engine.fetch("t", "a", owner="o")).status is FetchStatus.NO_NEW_MSG


async def moves(engine) -> int:
    return (await engine.offset_moves([("t", "a")])).get(("t", "a"), 0)


async def test_offset_moves_are_counted_once_each_and_only_moves(make_engine, store):
    """A client's forceAck naming another offset than the committed one and leaving the
    commit elsewhere (a rewind, a skip) is a move; so is an offset found past the end.
    Consuming, a forceAck of the committed offset (NO_MATCHED_MSG's), confirming a
    correction, and what retention overtook (a retention loss) are not."""
    engine = make_engine(catalog())
    await produce(engine, 2)  # 0, 1 (retention keeps 2)
    got = await engine.fetch("t", "a", count=1, owner="o")
    await engine.commit("t", "a", 0, offset=0, next_offset=1, lock_time=got.lock_token)
    got = await engine.fetch("t", "a", count=1, owner="o")
    await engine.commit(
        "t", "a", 0, offset=1, next_offset=2, lock_time=got.lock_token, force=True
    )  # forceAck of the committed offset: consuming
    assert await moves(engine) == 0
    await produce(engine, 1)  # 2
    got = await engine.fetch("t", "a", count=1, owner="o")
    rewind = await engine.commit(
        "t", "a", 0, offset=0, next_offset=1, lock_time=got.lock_token, force=True
    )
    assert (rewind.committed, rewind.moved_from) == (1, 2)
    assert await moves(engine) == 1
    got = await engine.fetch("t", "a", count=1, owner="o")
    skip = CommitRequest(0, 7, 3, got.lock_token, force=True)  # another offset, to the end
    pulled = await engine.commit_and_fetch("t", "a", commit=skip, owner="o")
    assert pulled.commit is not None and pulled.commit.moved_from == 1
    assert await moves(engine) == 2
    await produce(engine, 1)  # 3
    got = await engine.fetch("t", "a", count=1, owner="o")
    back = await engine.commit(
        "t", "a", 0, offset=3, next_offset=2, lock_time=got.lock_token, force=True
    )  # from the committed offset, backwards
    assert (back.committed, back.moved_from) == (2, 3) and await moves(engine) == 3
    state = PartitionKeys("t", 0).state(consumer_id("a", None))
    await store.hset(state, "ack", 9)
    await produce(engine, 1)  # 4
    corrected = (await engine.commit_and_fetch("t", "a", commit=None, owner="o")).fetched
    assert corrected.status is FetchStatus.CORRECTED and await moves(engine) == 4
    confirm = CommitRequest(0, 9, corrected.ack_index, corrected.lock_token, force=True)
    done = await engine.commit_and_fetch("t", "a", commit=confirm, owner="o")
    assert done.commit is not None and done.commit.moved_from == -1


async def test_what_retention_overtook_is_no_move(make_engine):
    engine = make_engine(catalog())
    await overtaken(engine)
    assert (await engine.commit_and_fetch("t", "a", commit=None, owner="o")).fetched.status is (
        FetchStatus.CORRECTED
    )
    assert await moves(engine) == 0


async def test_a_clients_own_ack_index_commit_is_a_move_and_an_operation_is_not(make_engine):
    """``reset_offsets(by_client=True)`` (JMQ4 COMMIT_ACK_INDEX) counts each partition it
    moved; setting the index where it is, a first position, and an approved reset (the
    console's, the default) do not count."""
    engine = make_engine(catalog())
    await produce(engine, 2)  # 0, 1
    await engine.reset_offsets("t", "a", position=0, by_client=True)  # no index before
    assert await moves(engine) == 0
    assert await engine.reset_offsets("t", "a", position="latest", by_client=True) == {0: 2}
    assert await moves(engine) == 1
    await engine.reset_offsets("t", "a", position=2, by_client=True)  # where it is
    assert await moves(engine) == 1
    await engine.reset_offsets("t", "a", position="earliest")  # an approved reset
    assert await moves(engine) == 1
    await engine.reset_offsets("t", "a", position=99, by_client=True)  # clamped to 2: a move
    assert await moves(engine) == 2
