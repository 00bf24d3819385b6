"""What processes share about themselves through the engine: presence, mailboxes, report
boards, partitions in turn, partition-group assignment and the store's health."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as RedisConnectionError

from brokers.engine import Engine, Presence, StoreUnavailable, mailbox, publish_report, read_reports
from brokers.engine.keys import mailbox_key, presence_key
from tests.engine.conftest import listening_inbox, snapshot

# ---------------------------------------------------------------------- presence


async def test_presence_counts_every_owner_and_drops_lapsed_members(make_engine, clock) -> None:
    engine: Engine = make_engine()
    a = engine.presence("subs", "a", ttl_ms=1_000)
    b = engine.presence("subs", "b", ttl_ms=1_000)
    await a.join("q", "s1")
    await b.join("q", "s1")  # the same member name on another owner is another member
    await a.join("other", "s1")
    assert (await a.count("q"), await b.count("q"), await a.count("other")) == (2, 2, 1)
    await a.leave("q", "s1")
    assert await b.count("q") == 1
    clock.advance(0.6)
    await b.renew([("q", "s1")])
    clock.advance(0.6)  # a's "other" entry lapsed; b's renewed one did not
    assert (await a.count("q"), await a.count("other")) == (1, 0)
    await a.clear("q")
    assert await b.count("q") == 0
    # a renewal never brings back what was cleared
    await b.renew([("q", "s1")])
    assert await b.count("q") == 0


async def test_presence_rooms_of_spaces_are_apart(make_engine) -> None:
    engine: Engine = make_engine()
    await engine.presence("one", "a", 1_000).join("q", "s")
    assert await engine.presence("two", "a", 1_000).count("q") == 0
    assert presence_key("one", "q") != presence_key("two", "q")


_OWNERS = st.sampled_from(["a", "b"])
_ROOMS = st.sampled_from(["r1", "r2"])
_MEMBERS = st.sampled_from(["m1", "m2", "m3"])
_OPS = st.one_of(
    st.tuples(st.just("join"), _OWNERS, _ROOMS, _MEMBERS),
    st.tuples(st.just("leave"), _OWNERS, _ROOMS, _MEMBERS),
    st.tuples(st.just("renew"), _OWNERS),
    st.tuples(st.just("count"), _ROOMS),
    st.tuples(st.just("clear"), _ROOMS),
    st.tuples(st.just("advance"), st.integers(1, 1_500)),
)
TTL_MS = 1_000


async def _presence_against_model(redis_url: str, ops: list[tuple]) -> None:
    now = [1_000_000]
    client = aioredis.from_url(redis_url)
    try:
        await client.delete(*(presence_key("h", r) for r in ("r1", "r2")))
        owners = {o: Presence(client, "h", o, TTL_MS, lambda: now[0]) for o in ("a", "b")}
        stored: dict[tuple[str, str, str], int] = {}  # (owner, room, member) -> expiry
        joined: dict[str, set[tuple[str, str]]] = {"a": set(), "b": set()}
        for op in ops:
            match op:
                case ("join", owner, room, member):
                    await owners[owner].join(room, member)
                    stored[(owner, room, member)] = now[0] + TTL_MS
                    joined[owner].add((room, member))
                case ("leave", owner, room, member):
                    await owners[owner].leave(room, member)
                    stored.pop((owner, room, member), None)
                    joined[owner].discard((room, member))
                case ("renew", owner):
                    await owners[owner].renew(sorted(joined[owner]))
                    for room, member in joined[owner]:
                        if (owner, room, member) in stored:
                            stored[(owner, room, member)] = now[0] + TTL_MS
                case ("count", room):
                    for entry in [e for e, t in stored.items() if e[1] == room and t <= now[0]]:
                        del stored[entry]
                    live = sum(1 for e in stored if e[1] == room)
                    assert await owners["a"].count(room) == live
                    # never more than the members joined and not left
                    assert live <= sum(1 for o in joined for r, _ in joined[o] if r == room)
                case ("clear", room):
                    await owners["a"].clear(room)
                    for entry in [e for e in stored if e[1] == room]:
                        del stored[entry]
                case ("advance", ms):
                    now[0] += ms
    finally:
        await client.aclose()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(_OPS, max_size=30))
def test_presence_counts_exactly_the_members_that_have_not_lapsed(redis_url, ops) -> None:
    asyncio.run(_presence_against_model(redis_url, ops))


# ---------------------------------------------------------------------- mailboxes


async def test_mailbox_directory_claims_renews_and_releases_only_its_own(
    make_engine, store
) -> None:
    engine: Engine = make_engine()
    mine, theirs = engine.mailboxes("box", 30_000), engine.mailboxes("box", 30_000)
    assert mine.owner != theirs.owner
    assert await theirs.lookup("n") is None
    await mine.claim("n", b"mine")
    assert await theirs.lookup("n") == b"mine"
    assert 0 < await store.pttl(mailbox_key("box", "n")) <= 30_000
    await theirs.claim("n", b"theirs")  # the name moved on
    await mine.release("n", b"mine")
    assert await mine.lookup("n") == b"theirs"
    await theirs.release("n", b"theirs")
    assert await mine.lookup("n") is None
    await mine.renew([("n", b"mine"), ("m", b"mine")])  # restores lost registrations
    assert (await theirs.lookup("n"), await theirs.lookup("m")) == (b"mine", b"mine")
    await mine.renew([])


async def test_mailbox_inbox_hears_what_is_sent_to_its_owner(make_engine) -> None:
    engine: Engine = make_engine()
    async with listening_inbox(engine) as (owner, sender, heard):
        assert await sender.send(owner.owner, b"\x00reply")
        assert await asyncio.wait_for(heard.get(), 5) == b"\x00reply"
        assert not await sender.send("nobody", b"lost")  # nobody listens there
        other_space = engine.mailboxes("elsewhere", 30_000)
        assert not await other_space.send(owner.owner, b"lost")
    assert not await sender.send(owner.owner, b"after stop")


async def test_a_group_broadcast_reaches_every_member_and_counts_them(make_engine) -> None:
    """Members of a group hear its broadcasts (the sender's own too) apart from their
    inbox; the broadcast says how many heard it, and a member that stopped is not one."""
    engine: Engine = make_engine()
    members = [engine.mailboxes("box", 30_000, group="g") for _ in range(2)]
    outsider = engine.mailboxes("box", 30_000)
    heard: list[asyncio.Queue[tuple[str, bytes]]] = [asyncio.Queue() for _ in members]
    for box, queue in zip(members, heard, strict=True):
        await box.start(
            lambda data, q=queue: q.put_nowait(("inbox", data)),
            lambda data, q=queue: q.put_nowait(("group", data)),
        )
    try:
        assert all(box.listening for box in members) and not outsider.listening
        assert await outsider.broadcast("g", b"all") == 2
        assert await outsider.broadcast("other", b"none") == 0
        assert await members[0].send(members[1].owner, b"one")
        assert [await asyncio.wait_for(q.get(), 5) for q in heard] == [("group", b"all")] * 2
        assert await asyncio.wait_for(heard[1].get(), 5) == ("inbox", b"one")
        await members[1].stop()
        assert not members[1].listening
        assert await members[0].broadcast("g", b"left") == 1
        assert await asyncio.wait_for(heard[0].get(), 5) == ("group", b"left")
    finally:
        await members[0].stop()


async def test_mailbox_calls_go_on_after_their_connection_was_killed(redis_url) -> None:
    """Claims, lookups, sends and releases share the engine's pipelined connection: one
    killed under them (a Redis restart looks the same) is replaced for the same call."""
    name = "test-mailbox-kill"
    client, admin = aioredis.from_url(redis_url, client_name=name), aioredis.from_url(redis_url)
    engine = Engine(client, snapshot)

    async def kill_commands_connections() -> int:
        """Kill this test's connections other than its inbox's subscription."""
        found = [c for c in await admin.client_list() if c.get("name") == name]
        return sum(
            [await admin.client_kill_filter(_id=c["id"]) for c in found if "P" not in c["flags"]]
        )

    try:
        async with listening_inbox(engine) as (owner, sender, heard):
            await sender.claim("n", b"entry")
            assert await sender.lookup("n") == b"entry"  # the pipelined connection is up
            for call in (
                lambda: sender.lookup("n"),
                lambda: sender.send(owner.owner, b"after a kill"),
                lambda: sender.claim("m", b"entry"),
                lambda: sender.release("n", b"entry"),
            ):
                assert await kill_commands_connections() >= 1
                await call()
            assert await asyncio.wait_for(heard.get(), 5) == b"after a kill"
            assert await sender.lookup("n") is None
            assert await sender.lookup("m") == b"entry"
    finally:
        await engine.close()
        await admin.aclose()
        await client.aclose()


async def test_a_mailbox_call_caught_on_a_dying_connection_is_made_again(
    make_engine, monkeypatch
) -> None:
    """The connection died under the call (its first attempt fails as a Redis restart
    makes it fail): made once more, on a fresh one; failing again, StoreUnavailable."""
    engine: Engine = make_engine()
    boxes = engine.mailboxes("box", 30_000)
    await boxes.claim("n", b"entry")
    real, failures = mailbox.command, []

    async def dying(client, *args):
        if failures:
            raise RedisConnectionError(failures.pop())
        return await real(client, *args)

    monkeypatch.setattr(mailbox, "command", dying)
    failures.append("Connection closed by server.")
    assert await boxes.lookup("n") == b"entry"
    failures.extend(["Connection closed by server."] * 2)
    with pytest.raises(StoreUnavailable):
        await boxes.lookup("n")


async def test_mailbox_reports_an_unreachable_redis_as_store_unavailable() -> None:
    client = aioredis.from_url("redis://127.0.0.1:1", socket_connect_timeout=1)
    boxes = Engine(client, snapshot).mailboxes("box", 30_000)
    try:
        for call in (
            boxes.lookup("n"),
            boxes.claim("n", b"entry"),
            boxes.release("n", b"entry"),
            boxes.send("someone", b"data"),
        ):
            with pytest.raises(StoreUnavailable):
                await call
    finally:
        await client.aclose()


# ---------------------------------------------------------------------- report boards


async def test_report_boards_are_apart_from_the_broker_reports(make_engine, store) -> None:
    engine: Engine = make_engine()
    await publish_report(store, "broker-1", {"state": "serving"}, valid_for_s=10)
    await engine.publish_report("board", "h:1", {"x": 1}, valid_for_s=10)
    await engine.publish_report("board", "h:2", {"x": 2}, valid_for_s=-1)  # already stale
    assert await engine.read_reports("board") == {"h:1": {"x": 1}}
    assert await engine.read_reports("board", ["h:2", "h:3", "h:1"]) == {"h:1": {"x": 1}}
    assert await engine.read_reports("board", []) == {}
    assert set(await read_reports(store)) == {"broker-1"}
    await engine.withdraw_report("board", "h:1")
    assert await engine.read_reports("board") == {}
    assert set(await read_reports(store)) == {"broker-1"}


# ---------------------------------------------------------------------- partitions in turn


async def test_partitions_in_turn_are_shared_by_every_engine(make_engine) -> None:
    snap = snapshot(topics={"t": {"partitions": 3}, "u": {"partitions": 2}})
    first, second = make_engine(snap), make_engine(snap)
    turns = [await (first if i % 2 else second).partition_in_turn("t") for i in range(7)]
    assert turns == [0, 1, 2, 0, 1, 2, 0]
    assert await first.partition_in_turn("u") == 0  # a counter per topic


# ---------------------------------------------------------------------- assignment


async def test_assignment_shares_groups_among_members(make_engine) -> None:
    engine: Engine = make_engine()
    assign: Callable = engine.assign_groups
    groups = [0, 1, 2, 3]
    assert await assign("t", "a", "m1", groups, session_timeout_ms=1_000, now_ms=0) == (0, 1, 2, 3)
    m2 = await assign("t", "a", "m2", groups, session_timeout_ms=1_000, now_ms=1)
    m1 = await assign("t", "a", "m1", groups, session_timeout_ms=1_000, now_ms=2)
    assert len(m1) == len(m2) == 2 and set(m1) | set(m2) == set(groups)
    other = await assign("t", "b", "m1", groups, session_timeout_ms=1_000, now_ms=3)
    assert other == (0, 1, 2, 3)  # another app's members are apart
    # m1 lapses (1 s + 60 s grace): m2 alone again
    alone = await assign("t", "a", "m2", groups, session_timeout_ms=1_000, now_ms=70_000)
    assert alone == (0, 1, 2, 3)


# ---------------------------------------------------------------------- health


async def test_ping_says_whether_the_store_answers(make_engine) -> None:
    assert await make_engine().ping() is None
    dead = aioredis.from_url("redis://127.0.0.1:1/0")
    try:
        down = Engine(dead, lambda: snapshot())
        assert await down.ping() == "ConnectionError"
    finally:
        await dead.aclose()


@pytest.mark.parametrize("space", ["a", "b"])
def test_mailbox_keys_keep_one_hash_tag_per_name(space: str) -> None:
    key = mailbox_key(space, "n")
    assert key.count("{") == 1 and key[key.index("{") + 1 : key.index("}")] == f"mb:{space}:n"
