"""Bounded caches of the servers' delivery paths: a dict that starts over when full.

A producer's properties recur on every message, so their written forms are kept; a
value seen once only costs its miss, and a cache that filled with such values is
emptied rather than searched for what to evict."""

from __future__ import annotations

from typing import TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")


def keep(cache: dict[_K, _V], key: _K, value: _V, limit: int) -> None:
    """Put ``value`` in ``cache``, which starts over when it holds ``limit`` entries."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
