"""The ``mqcloud`` source's options, and the catalog as one: a JSON snapshot of the
topics a read covers.

The driver builds it from the Django catalog (:mod:`pipeline.catalog`); Spark's Python
workers decode it into a :class:`brokers.engine.CatalogSnapshot` for the engine, so no
worker ever touches the database.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from brokers.engine import CatalogSnapshot, TopicInfo

DEFAULT_SPLIT = 100_000
FOLLOW_ARCHIVE = "archive"


class OptionError(ValueError):
    """A data-source option is missing or malformed."""


def encode_catalog(snapshot: CatalogSnapshot, topics: Iterable[str] | None = None) -> str:
    """JSON of ``snapshot`` reduced to ``topics`` (all when None): topics only, no apps."""
    wanted = snapshot.topics if topics is None else {c: snapshot.topics[c] for c in topics}
    return CatalogSnapshot(version=snapshot.version, topics=wanted).encode_json().decode()


def decode_catalog(text: str | None) -> CatalogSnapshot:
    """Inverse of :func:`encode_catalog`; OptionError when absent or malformed."""
    if not text:
        raise OptionError("option 'catalog' is required (a snapshot JSON from the driver)")
    try:
        snap = CatalogSnapshot.decode_json(text)
    except msgspec.DecodeError as exc:
        raise OptionError(f"option 'catalog' is not a catalog snapshot: {exc}") from exc
    for code, info in snap.topics.items():
        if info.partitions < 1:
            raise OptionError(f"option 'catalog': topic {code!r} is inconsistent")
    return snap


def select_topics(snapshot: CatalogSnapshot, names: str | None) -> tuple[TopicInfo, ...]:
    """The topics named in a comma-separated ``topics`` option (all in the snapshot if empty)."""
    if not names:
        return tuple(snapshot.topics[c] for c in sorted(snapshot.topics))
    chosen = []
    for code in dict.fromkeys(n.strip() for n in names.split(",") if n.strip()):
        if code not in snapshot.topics:
            raise OptionError(f"option 'topics': {code!r} is not in the catalog snapshot")
        chosen.append(snapshot.topics[code])
    return tuple(chosen)


def int_option(options: dict, name: str, default: int | None, *, minimum: int = 0) -> int | None:
    """An integer option ≥ ``minimum`` (``default`` when absent)."""
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError) as exc:
        raise OptionError(f"option {name!r} must be an integer, got {raw!r}") from exc
    if value < minimum:
        raise OptionError(f"option {name!r} must be at least {minimum}, got {value}")
    return value


class SourceOptions:
    """Validated options shared by the batch and the stream reader."""

    def __init__(self, options: dict[str, str]) -> None:
        self.redis_url = options.get("redis_url") or ""
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise OptionError("option 'redis_url' must be a redis://, rediss:// or unix:// URL")
        self.follow = options.get("follow") or ""
        if self.follow not in ("", FOLLOW_ARCHIVE):
            raise OptionError(f"option 'follow' must be '{FOLLOW_ARCHIVE}', got {self.follow!r}")
        if self.follow:
            self.snapshot = CatalogSnapshot()
            self.topics: tuple[TopicInfo, ...] = ()
        else:
            self.snapshot = decode_catalog(options.get("catalog"))
            self.topics = select_topics(self.snapshot, options.get("topics"))
        self.split_size = int_option(options, "split_size", DEFAULT_SPLIT, minimum=1)
        self.max_rows = int_option(options, "max_rows_per_batch", None, minimum=1)
        self.from_ms = int_option(options, "from_ms", None)
        self.to_ms = int_option(options, "to_ms", None)
