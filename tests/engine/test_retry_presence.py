"""RetryPresence: when a consumer's lease or fetch must ask a group's retry store again."""

from __future__ import annotations

from brokers.engine.retry_presence import ASK, RECHECK_MS, RetryPresence


class Stamps:
    """A notifier's ``stamp``: None while not listening, else a value that changes."""

    def __init__(self) -> None:
        self.value: tuple[int, int] | None = (1, 0)

    def stamp(self, topic: str) -> tuple[int, int] | None:
        return self.value


def make(now: list[int], stamps: Stamps) -> RetryPresence:
    return RetryPresence(stamps, lambda: now[0])  # type: ignore[arg-type]


def test_an_empty_store_is_asked_again_only_after_a_notification():
    now, stamps = [0], Stamps()
    presence = make(now, stamps)
    assert presence.look("t", "a") == ASK
    presence.learned("t", "a", found=False, next_due=None)
    now[0] += 10 * RECHECK_MS
    assert presence.look("t", "a") == 0  # nothing, and nothing coming
    assert presence.look("t", "other") == ASK  # per group
    stamps.value = (1, 1)  # a retry was added somewhere on the topic
    assert presence.look("t", "a") == ASK


def test_a_backing_off_retry_is_asked_for_when_due():
    now, stamps = [0], Stamps()
    presence = make(now, stamps)
    presence.learned("t", "a", found=False, next_due=5_000)
    now[0] = 4_999
    assert presence.look("t", "a") == 5_000
    now[0] = 5_000
    assert presence.look("t", "a") == ASK
    presence.learned("t", "a", found=True, next_due=None)  # leased some: ask every time
    assert presence.look("t", "a") == ASK
    presence.learned("t", "a", found=False, next_due=None)
    presence.forget("t", "a")  # this process added one
    assert presence.look("t", "a") == ASK


def test_without_notifications_it_asks_again_within_the_recheck_interval():
    now, stamps = [0], Stamps()
    stamps.value = None
    presence = make(now, stamps)
    presence.learned("t", "a", found=False, next_due=None)
    assert presence.look("t", "a") == 0
    now[0] = RECHECK_MS
    assert presence.look("t", "a") == ASK


async def test_push_leases_of_a_group_without_retries_ask_its_store_once(make_engine, monkeypatch):
    """The common path pays nothing for retries: a hundred leases of a group that never
    had one look at its retry store once (then only after a change or the recheck)."""
    from brokers.engine import Message
    from brokers.engine.retry import RetryStore
    from tests.engine.test_group_features import queue_snap

    asked = []
    real = RetryStore.lease_or_next_due

    async def counted(self, **kw):
        asked.append(1)
        return await real(self, **kw)

    monkeypatch.setattr(RetryStore, "lease_or_next_due", counted)
    engine = make_engine(queue_snap())
    for i in range(100):
        await engine.append_many("q", "a", [Message(b"%d" % i)])
        lease = await engine.lease("q", "a", count=1, owner="t")
        await engine.settle("q", "a", 0, [d.index for d in lease.deliveries])
    assert len(asked) == 1
