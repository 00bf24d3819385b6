"""Hypothesis state machine over shared delivery (cursor, in-flight ranges, ack index).

Several consumers of one group lease batches, ack some of what they hold (in any order),
release or fail single messages, crash (their connection closes: what they held comes
back), or let their leases expire while the clock moves. Invariants:

* no loss: every produced message is settled exactly when the model says so, and a final
  drain delivers every unsettled one;
* no acked message is delivered again: a settled index never reappears, unless the test
  itself never settled it (a lease that expired may redeliver what was not acked);
* a message is held by at most one consumer at a time;
* ranges merge correctly: the ack index is exactly the lowest unsettled index, and the
  group's in-flight count equals the model's held messages;
* an expired or released range returns exactly its unacked part;
* a lease that found something says exactly whether more is servable at once;
* every lease counts as a delivery — released, failed, expired or crashed alike — except
  one handed back unread (read ahead, never seen): ``attempts`` is the message's
  deliveries so far, and ``redelivered`` says whether there were any before;
* a failed attempt kept for its lessee (``retry_here``) stays that consumer's alone, for
  a new lease, counted as its next delivery; a lease no longer the caller's is left be.
"""

from __future__ import annotations

import asyncio
import os

import redis.asyncio as aioredis
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from brokers.engine import Delivery, Engine, Message, QueueRetry, QueueSettings
from tests.engine.conftest import FakeClock, snapshot
from tests.redis_fixtures import require_test_session

SNAPSHOT = snapshot(
    topics={"q": {"partitions": 1, "queue": QueueSettings(max_retry_attempts=1000)}},
    consumers=[{"topic": "q", "app": "a"}],
)
CONSUMERS = ["c1", "c2", "c3"]
LEASE_MS = 1000


class GroupMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        require_test_session()
        self.loop = asyncio.new_event_loop()
        self.client = aioredis.from_url(os.environ["REDIS_URL"])
        self.run(self.client.flushall())
        self.clock = FakeClock()
        self.engine = Engine(
            self.client, lambda: SNAPSHOT, clock=self.clock, queue_retry=QueueRetry(0, 0)
        )
        self.produced = 0
        self.settled: set[int] = set()
        self.held: dict[str, dict[int, int]] = {c: {} for c in CONSUMERS}
        """consumer → index → its lease's deadline (ms)"""
        self.deliveries: dict[int, int] = {}
        """index → how often it was delivered (leases not handed back unread)"""
        self.records: dict[int, Delivery] = {}
        """index → its last delivery (what a lessee hands back to the engine)"""

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        if not hasattr(self, "loop"):
            return
        try:
            self.drain()
        finally:
            self.run(self.engine.close())
            self.run(self.client.aclose())
            self.loop.close()

    # ----------------------------------------------------------------- helpers

    def _expire_model(self) -> None:
        """Leases past their deadline are no longer held by anyone."""
        now = int(self.clock() * 1000)
        for c in CONSUMERS:
            self.held[c] = {i: d for i, d in self.held[c].items() if d > now}

    def _all_held(self) -> set[int]:
        return set().union(*(set(h) for h in self.held.values()))

    # ----------------------------------------------------------------- rules

    @rule(n=st.integers(1, 4))
    def produce(self, n: int) -> None:
        msgs = [Message(b"m%d" % (self.produced + i)) for i in range(n)]
        if n > 1 and n % 2:
            self.run(self.engine.append("q", "a", msgs))
        else:
            self.run(self.engine.append_many("q", "a", msgs))
        self.produced += n

    @rule(consumer=st.sampled_from(CONSUMERS), count=st.integers(1, 4))
    def lease(self, consumer: str, count: int) -> None:
        self._expire_model()
        lease = self.run(
            self.engine.lease("q", "a", count=count, owner=consumer, lease_ms=LEASE_MS)
        )
        got = lease.deliveries
        indexes = [d.index for d in got]
        note(f"lease {consumer} {count} -> {indexes}")
        assert len(indexes) <= count
        for d in got:
            assert d.message.body == b"m%d" % d.index  # what was produced at that index
        others = self._all_held()
        for i in indexes:
            assert i not in self.settled, f"settled index {i} delivered again"
            assert i not in others, f"index {i} held twice"
        deadline = int(self.clock() * 1000) + LEASE_MS
        for d in got:
            self.held[consumer][d.index] = deadline
            self.records[d.index] = d
            before = self.deliveries.get(d.index, 0)
            assert (d.attempts, d.redelivered) == (before + 1, before > 0), (d, before)
            self.deliveries[d.index] = before + 1
        if got:  # "more" is exact: servable now is what is neither settled nor held
            servable = set(range(self.produced)) - self.settled - self._all_held()
            assert lease.more == bool(servable), (lease.more, sorted(servable))

    @precondition(lambda self: any(self.held.values()))
    @rule(consumer=st.sampled_from(CONSUMERS), data=st.data())
    def ack(self, consumer: str, data) -> None:
        self._expire_model()
        if not self.held[consumer]:
            return
        chosen = data.draw(st.sets(st.sampled_from(sorted(self.held[consumer])), min_size=1))
        note(f"ack {consumer} {sorted(chosen)}")
        n = self.run(self.engine.settle("q", "a", 0, sorted(chosen)))
        assert n == len(chosen), f"settled {n} of {len(chosen)} held"
        self.settled |= chosen
        for i in chosen:
            del self.held[consumer][i]

    @precondition(lambda self: any(self.held.values()))
    @rule(consumer=st.sampled_from(CONSUMERS), data=st.data(), fail=st.booleans())
    def give_back(self, consumer: str, data, fail: bool) -> None:
        self._expire_model()
        if not self.held[consumer]:
            return
        chosen = data.draw(st.sets(st.sampled_from(sorted(self.held[consumer])), min_size=1))
        note(f"{'fail' if fail else 'release'} {consumer} {sorted(chosen)}")
        call = self.engine.fail if fail else self.engine.release
        self.run(call("q", "a", 0, sorted(chosen)))
        for i in chosen:
            del self.held[consumer][i]

    @precondition(lambda self: any(self.held.values()))
    @rule(consumer=st.sampled_from(CONSUMERS), data=st.data())
    def hand_back_unread(self, consumer: str, data) -> None:
        self._expire_model()
        if not self.held[consumer]:
            return
        chosen = data.draw(st.sets(st.sampled_from(sorted(self.held[consumer])), min_size=1))
        note(f"unread {consumer} {sorted(chosen)}")
        self.run(self.engine.release("q", "a", 0, sorted(chosen), unread=True))
        for i in chosen:
            del self.held[consumer][i]
            self.deliveries[i] -= 1

    @precondition(lambda self: any(self.held.values()))
    @rule(consumer=st.sampled_from(CONSUMERS), other=st.sampled_from(CONSUMERS), data=st.data())
    def keep_for_lessee(self, consumer: str, other: str, data) -> None:
        """Retry one held delivery to its lessee (asked by ``other``: kept only if that
        is the lessee)."""
        self._expire_model()
        if not self.held[consumer]:
            return
        index = data.draw(st.sampled_from(sorted(self.held[consumer])))
        due = self.run(
            self.engine.retry_here("q", "a", self.records[index], owner=other, lease_ms=LEASE_MS)
        )
        note(f"keep {index} of {consumer} asked by {other} -> {due}")
        assert (due is not None) == (other == consumer)
        if due is not None:  # no backoff here (QueueRetry(0, 0)): a new lease from now
            assert due == int(self.clock() * 1000)
            self.held[consumer][index] = int(self.clock() * 1000) + LEASE_MS
            self.deliveries[index] += 1

    @rule(consumer=st.sampled_from(CONSUMERS))
    def crash(self, consumer: str) -> None:
        note(f"crash {consumer}")
        self.run(self.engine.release_owner("q", "a", consumer))
        self.held[consumer] = {}

    @rule(seconds=st.sampled_from([0.2, 0.6, 1.1]))
    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self._expire_model()

    # ----------------------------------------------------------------- invariants

    @invariant()
    def ack_index_is_the_lowest_unsettled(self) -> None:
        if not hasattr(self, "engine"):
            return
        state = self.run(self.client.hget("mq:{t:q:0}:c:a", "ack"))
        if state is None:
            return
        lowest = next((i for i in range(self.produced) if i not in self.settled), self.produced)
        assert int(state) == lowest, (int(state), lowest)

    @invariant()
    def in_flight_matches_the_model(self) -> None:
        if not hasattr(self, "engine"):
            return
        self._expire_model()
        stats = self.run(self.engine.group_stats("q", "a"))
        assert stats.in_flight == len(self._all_held()), (stats, self.held)
        assert stats.backlog == self.produced - min(
            (i for i in range(self.produced) if i not in self.settled), default=self.produced
        )

    # ----------------------------------------------------------------- drain

    def drain(self) -> None:
        """Everything not settled is delivered again (after its lease ends), exactly once
        to the drainer, and then the group has nothing left."""
        self.clock.advance(LEASE_MS / 1000 + 1)
        for c in CONSUMERS:
            self.held[c] = {}
        seen: set[int] = set()
        while True:
            got = self.run(self.engine.lease("q", "a", count=50, owner="drain")).deliveries
            if not got:
                break
            indexes = [d.index for d in got]
            assert not (set(indexes) & seen), "redelivered within the drain"
            assert not (set(indexes) & self.settled)
            seen |= set(indexes)
            self.run(self.engine.settle("q", "a", 0, indexes))
        assert seen == set(range(self.produced)) - self.settled, "a message was lost"
        stats = self.run(self.engine.group_stats("q", "a"))
        assert (stats.backlog, stats.in_flight, stats.retrying) == (0, 0, 0)


GroupMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupMachine = GroupMachine.TestCase
