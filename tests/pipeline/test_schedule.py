"""The rollup schedule of the long-lived pipeline: due ticks only, no Spark job when the
store has not changed, and each job over the minutes since the last one."""

from __future__ import annotations

from brokers.engine import CatalogSnapshot
from pipeline.schedule import SLACK_MS, RollupSchedule

MINUTE = 60_000
T0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE  # a whole minute, epoch ms


class Fake:
    """Clock, store marks and the calls the schedule made."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.now_ms = T0 + 30_000
        self.marks = {"orders/0": 5}
        self.rollups: list[tuple[int | None, int]] = []
        self.samples = 0

    def schedule(self, every_s: float = 300.0) -> RollupSchedule:
        return RollupSchedule(
            every_s=every_s,
            window_minutes=10,
            catalog=CatalogSnapshot,
            marks=lambda snapshot: dict(self.marks),
            rollup=lambda since, window: self.rollups.append((since, window)),
            sample_lag=self.sample,
            clock=lambda: self.now_s,
            now_ms=lambda: self.now_ms,
        )

    def sample(self, snapshot: CatalogSnapshot, now_ms: int) -> int:
        self.samples += 1
        return 3

    def later(self, seconds: float) -> None:
        self.now_s += seconds
        self.now_ms += int(seconds * 1000)


def test_a_tick_with_nothing_new_starts_no_spark_job():
    fake = Fake()
    tick = fake.schedule()
    first = tick()  # due at once: the default window
    assert first is not None and first.ran and first.since_ms is None
    assert fake.rollups == [(None, 10)]
    assert tick() is None  # not due yet
    fake.later(300)
    idle = tick()
    assert idle is not None and not idle.ran and idle.lag_samples == 3  # lag still sampled
    assert fake.rollups == [(None, 10)] and fake.samples == 1

    fake.marks["orders/0"] = 9  # something was appended
    fake.later(300)
    busy = tick()
    assert busy is not None and busy.ran
    # from the last rollup (less the slack for late store times), not the whole window
    assert fake.rollups[-1] == (T0 + 30_000 + 300_000 - SLACK_MS, 10)


def test_a_long_pause_is_capped_at_the_window_and_a_failure_is_retried():
    fake = Fake()
    tick = fake.schedule(every_s=60)
    tick()
    fake.marks["orders/0"] = 6
    fake.later(3600)  # an hour without a tick (the process was busy or stopped)
    tick()
    floor = fake.now_ms - fake.now_ms % MINUTE - 10 * MINUTE
    assert fake.rollups[-1] == (floor, 10)

    def broken(since, window):
        raise RuntimeError("spark died")

    tick.rollup = broken
    fake.marks["orders/0"] = 7
    fake.later(60)
    assert tick() is None  # logged, the archive goes on
    tick.rollup = lambda since, window: fake.rollups.append((since, window))
    fake.later(60)
    assert tick().ran  # the change is still pending: rolled up at the next tick
