"""The in-flight table of a VibeMQ connection (tracking.py) against a plain list: an ack
settles the oldest live delivery of its id, expired ones are left for the timers, and the
counts stay exact whatever the order of deliveries, acks and expiries."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.engine import Delivery
from brokers.servers.vibemq.tracking import Inflight, Tracked

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from("ab"), st.sampled_from("qr"), st.integers(0, 9)),
        st.tuples(st.just("ack"), st.sampled_from("abc"), st.integers(0, 4)),
        st.tuples(st.just("forget"), st.integers(0, 20)),
    ),
    max_size=40,
)


@settings(max_examples=300)
@given(OPS)
def test_inflight_agrees_with_a_list(ops) -> None:
    table, model = Inflight(), []
    for n, op in enumerate(ops):
        if op[0] == "add":
            _, message_id, queue, deadline = op
            item = Tracked(queue, message_id, Delivery(0, n, 1, b""), deadline)
            table.add(item)
            model.append(item)
        elif op[0] == "ack":
            _, message_id, now = op
            expected = next(
                (i for i in model if i.message_id == message_id and i.deadline_ms > now), None
            )
            assert table.settle(message_id, now) is expected
            if expected is not None:
                model.remove(expected)
        elif model:
            item = model.pop(op[1] % len(model))
            table.forget(item)
            table.forget(item)  # twice: no effect the second time
        assert len(table) == len(model)
        assert table.per_queue == Counter(i.queue for i in model)
        assert sorted(map(id, table.items())) == sorted(map(id, model))
        assert sorted(map(id, table.of_queue("q"))) == sorted(
            id(i) for i in model if i.queue == "q"
        )
