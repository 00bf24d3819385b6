"""One batch of work per transaction, run once when it commits.

Catalog rows saved in a transaction are published as one delta, and the consumers created
in it are pinned in one Redis round trip: each is a callable batch that the first change
registers with ``transaction.on_commit`` and later changes add to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import transaction

B = TypeVar("B", bound=Callable[[], object])


def add_to_commit_batch(kind: type[B], add: Callable[[B], None]) -> None:
    """Apply ``add`` to this transaction's batch of ``kind``, registering a new one
    (``kind()``) on commit when the transaction has none yet; outside a transaction the
    new batch runs at once.

    Adding to a batch registered earlier is safe wherever it was registered: a savepoint
    that is rolled back takes its callbacks with it (nothing is found then), and one that
    was released can no longer be rolled back, so the batch runs at commit with everything
    added since."""
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        for _sids, callback, _robust in connection.run_on_commit:
            if isinstance(callback, kind):
                add(callback)
                return
    batch = kind()
    add(batch)
    transaction.on_commit(batch)
