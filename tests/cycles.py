"""What the collector finds in reference cycles: for tests that check a hot path frees
what it makes by reference counting alone (a broker raises its collection thresholds, and
a collection of tens of thousands of objects stalls every connection)."""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from collections.abc import Iterator


@contextlib.contextmanager
def project_cycles() -> Iterator[Counter[str]]:
    """Collect, run the block with the collector off, then collect keeping what was
    found: the counter gets the types (``module.qualname``) of the project's objects
    among it. Other libraries' cycles (redis-py makes some per connection) are left out:
    the tests run beside them."""
    found: Counter[str] = Counter()
    gc.collect()
    gc.disable()
    try:
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        for obj in gc.garbage:
            kind = type(obj)
            if (kind.__module__ or "").startswith(("brokers.", "proxy.", "mqcloud.")):
                found[f"{kind.__module__}.{kind.__qualname__}"] += 1
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
