"""The catalog on Redis: a full snapshot, a versioned log of deltas, and its followers.

Layout (one ``{catalog}`` hash slot):

- ``version`` — the newest catalog version; every change takes the next number.
- ``log`` — a stream with one entry per version (id ``<version>-1``, field ``d``: an
  encoded :class:`CatalogDelta`). A full rebuild appends a *checkpoint* entry carrying the
  digest of the catalog at the snapshot's version.
- ``snapshot`` / ``snapshot-version`` — the last full snapshot and its version; the log is
  trimmed to the entries after it (and a margin), so snapshot + log always reach the newest
  version.

A version number is announced on ``mqcloud:catalog:changed`` after each entry. A process
follows the log in order (:class:`CatalogFollower`); it reads the full snapshot only at
start, after a gap in versions (an entry trimmed away, Redis data lost) or when a
checkpoint's digest disagrees with its own — and never replaces its catalog with one older
than the version it already serves.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import redis.asyncio as aioredis

from brokers.engine.background import cancel_and_wait
from brokers.engine.catalog.snapshot import CatalogDelta, CatalogSnapshot, Checkpoint
from brokers.engine.reconnect import log_retried

log = logging.getLogger(__name__)

VERSION_KEY = "mqcloud:{catalog}:version"
LOG_KEY = "mqcloud:{catalog}:log"
SNAPSHOT_KEY = "mqcloud:{catalog}:full-snapshot"
SNAPSHOT_VERSION_KEY = "mqcloud:{catalog}:snapshot-version"
INVALIDATION_CHANNEL = "mqcloud:catalog:changed"

LOG_MAX_ENTRIES = 50_000
"""Approximate bound of the log between two full snapshots (a safety net: the periodic
rebuild trims it long before)."""
LOG_KEEP_BEFORE_SNAPSHOT = 1_000
"""Entries kept before the stored snapshot's version, for followers just behind it."""
LOG_READ_BATCH = 2_000

# KEYS: version, log. ARGV: delta body, channel, max log length.
# Returns the version given to the delta, or 0 when the catalog has no version yet (Redis
# lost it or never had it): the caller then publishes a full snapshot instead.
APPEND_DELTA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local v = redis.call('INCR', KEYS[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], v .. '-1', 'd', ARGV[1])
redis.call('PUBLISH', ARGV[2], v)
return v
"""

# KEYS: version, log, snapshot, snapshot-version.
# ARGV: snapshot blob, its version, checkpoint entry body, channel, entries kept before it.
# Stores the snapshot unless a newer one is stored, makes sure the catalog version is at
# least the snapshot's, appends the checkpoint entry and trims the log to what follows.
# Returns the checkpoint's version, or 0 when refused.
STORE_SNAPSHOT = """
local sv = tonumber(ARGV[2])
local stored = tonumber(redis.call('GET', KEYS[4]) or '-1')
if stored >= sv then return 0 end
redis.call('SET', KEYS[3], ARGV[1])
redis.call('SET', KEYS[4], sv)
local v = tonumber(redis.call('GET', KEYS[1]) or '-1')
if v < sv then redis.call('SET', KEYS[1], sv) end
v = redis.call('INCR', KEYS[1])
redis.call('XTRIM', KEYS[2], 'MINID', math.max(0, sv - tonumber(ARGV[5])))
redis.call('XADD', KEYS[2], v .. '-1', 'd', ARGV[3])
redis.call('PUBLISH', ARGV[4], v)
return v
"""


def version_floor() -> int:
    """The first version of a catalog Redis has never seen: milliseconds since the epoch,
    so versions keep rising across a Redis that lost its data."""
    return int(time.time() * 1000)


def snapshot_args(snapshot: CatalogSnapshot) -> list[Any]:
    """ARGV of :data:`STORE_SNAPSHOT` for ``snapshot`` (its digest is computed here)."""
    checkpoint = CatalogDelta(checkpoint=Checkpoint(snapshot.version, snapshot.digest))
    return [
        snapshot.encode(),
        snapshot.version,
        checkpoint.encode(),
        INVALIDATION_CHANNEL,
        LOG_KEEP_BEFORE_SNAPSHOT,
    ]


STORE_SNAPSHOT_KEYS = (VERSION_KEY, LOG_KEY, SNAPSHOT_KEY, SNAPSHOT_VERSION_KEY)
APPEND_DELTA_KEYS = (VERSION_KEY, LOG_KEY)


def delta_args(delta: CatalogDelta) -> list[Any]:
    """ARGV of :data:`APPEND_DELTA` for ``delta``."""
    return [delta.encode(), INVALIDATION_CHANNEL, LOG_MAX_ENTRIES]


async def publish_snapshot(client: aioredis.Redis, snapshot: CatalogSnapshot) -> int:
    """Store ``snapshot`` as the catalog at its version (unless a newer snapshot is
    stored) and tell every follower. Returns the checkpoint's version, 0 if refused."""
    return int(await client.eval(STORE_SNAPSHOT, 4, *STORE_SNAPSHOT_KEYS, *snapshot_args(snapshot)))


async def publish_delta(client: aioredis.Redis, delta: CatalogDelta) -> int:
    """Append ``delta`` as the next catalog version and announce it. Returns its version,
    or 0 when Redis has no catalog yet (publish a full snapshot then)."""
    return int(await client.eval(APPEND_DELTA, 2, *APPEND_DELTA_KEYS, *delta_args(delta)))


class CatalogFollower:
    """One process's catalog: the newest snapshot it built by applying the log in order.

    Holds no connection: drivers read log entries and snapshots from Redis and hand them
    here (:func:`catch_up` for asyncio; the console's loader has a synchronous one).
    ``current`` only ever moves to a higher version.
    """

    DIGESTS_KEPT = 256

    def __init__(self, snapshot: CatalogSnapshot | None = None) -> None:
        self.current = snapshot if snapshot is not None else CatalogSnapshot()
        self._digests: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._lock = threading.Lock()  # console threads may share one follower
        self.resyncs = 0
        """Full snapshots loaded after the first one (gaps and checkpoint mismatches)."""

    def log_start(self) -> str:
        """The first log entry id this follower has not applied."""
        return f"{self.current.version + 1}-0"

    def follow(self, entries: Sequence[tuple[Any, Any]], newest: int | None = None) -> bool:
        """Apply log ``entries`` (``XRANGE`` replies) in order. False when they cannot be
        applied: a version is missing, a checkpoint's digest disagrees with the one this
        follower had at that version, or Redis's ``newest`` version is below this
        follower's (Redis was replaced) — a full snapshot is needed then."""
        current = self.current
        if newest is not None and newest < current.version:
            return False
        ok = True
        for entry_id, fields in entries:
            version = _entry_version(entry_id)
            if version <= current.version:
                continue
            if version != current.version + 1:
                ok = False
                break
            try:
                delta = CatalogDelta.decode(_field(fields), version)
            except (ValueError, msgspec.MsgspecError):
                log.exception("catalog v%d: unreadable log entry", version)
                ok = False
                break
            checkpoint = delta.checkpoint
            if checkpoint is not None:
                mine = self._digests.get(checkpoint.version)
                if mine is not None and mine != checkpoint.digest:
                    log.warning(
                        "catalog v%d: digest %x differs from the database's %x; reloading",
                        checkpoint.version,
                        mine,
                        checkpoint.digest,
                    )
                    ok = False
                    break
            current = current.apply(delta)
            self._remember(current)
        self._advance(current)
        return ok

    def rebase(
        self,
        snapshot: CatalogSnapshot,
        entries: Sequence[tuple[Any, Any]],
        newest: int | None = None,
    ) -> bool:
        """Adopt ``snapshot`` followed by log ``entries`` if that reaches at least the
        current version without a gap; otherwise keep the current catalog. Returns whether
        it was adopted.

        The one way back: when Redis's ``newest`` version is below this follower's, Redis
        was replaced by one that never saw our versions (a restore, a test's fresh server),
        and its catalog is adopted whatever its version."""
        replaced = newest is not None and newest < self.current.version
        candidate = CatalogFollower(snapshot)
        candidate._remember(snapshot)
        if not candidate.follow(entries):
            return False
        if candidate.current.version < self.current.version and not replaced:
            return False
        if replaced:
            log.warning(
                "catalog: Redis holds v%d, older than this process's v%d; following it",
                candidate.current.version,
                self.current.version,
            )
        if self.current.version:
            self.resyncs += 1
        self._digests = candidate._digests
        self._advance(candidate.current, force=True)
        return True

    def _advance(self, snapshot: CatalogSnapshot, *, force: bool = False) -> None:
        with self._lock:  # never backwards, even when two threads catch up at once
            if force or snapshot.version > self.current.version:
                self.current = snapshot

    def _remember(self, snapshot: CatalogSnapshot) -> None:
        self._digests[snapshot.version] = snapshot.digest
        while len(self._digests) > self.DIGESTS_KEPT:
            self._digests.popitem(last=False)


def _entry_version(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])


def _field(fields: dict[Any, Any]) -> bytes:
    body = fields.get(b"d", fields.get("d"))
    if body is None:
        raise ValueError("catalog log entry without a delta")
    return body if isinstance(body, bytes) else body.encode()


def decode_snapshot(data: bytes | None) -> CatalogSnapshot:
    """The stored full snapshot (an empty one when there is none or it is unreadable)."""
    if not data:
        return CatalogSnapshot()
    try:
        return CatalogSnapshot.decode(data)
    except msgspec.MsgspecError:
        log.exception("catalog: the stored snapshot is unreadable; waiting for the next one")
        return CatalogSnapshot()


def newest_version(value: bytes | str | None) -> int | None:
    """The ``version`` key's value as an int (None when Redis holds no catalog)."""
    return int(value) if value is not None else None


def next_read(batch: Sequence[tuple[Any, Any]]) -> str | None:
    """Where the next ``XRANGE`` of the log starts after ``batch``, or None when the
    batch was the last."""
    if len(batch) < LOG_READ_BATCH:
        return None
    return f"({_entry_version(batch[-1][0])}-1"


async def _read_log(client: aioredis.Redis, start: str | None) -> list[tuple[Any, Any]]:
    entries: list[tuple[Any, Any]] = []
    while start is not None:
        batch = await client.xrange(LOG_KEY, min=start, count=LOG_READ_BATCH)
        entries.extend(batch)
        start = next_read(batch)
    return entries


async def catch_up(client: aioredis.Redis, follower: CatalogFollower) -> bool:
    """Bring ``follower`` to the newest catalog version in Redis; True when it moved.

    Reads the version and the log after the follower's version in one round trip; on a
    gap or a checkpoint mismatch reads the full snapshot and the log after it. When Redis
    cannot bridge the gap either (its data was lost and no snapshot was published since),
    the follower keeps its catalog and the next call tries again."""
    before = follower.current
    async with client.pipeline(transaction=False) as pipe:
        pipe.get(VERSION_KEY)
        pipe.xrange(LOG_KEY, min=follower.log_start(), count=LOG_READ_BATCH)
        value, batch = await pipe.execute()
    newest = newest_version(value)
    entries = [*batch, *await _read_log(client, next_read(batch))]
    if not follower.follow(entries, newest):
        snapshot = decode_snapshot(await client.get(SNAPSHOT_KEY))
        entries = await _read_log(client, f"{snapshot.version + 1}-0")
        if not follower.rebase(snapshot, entries, newest):
            log.error(
                "catalog v%d: Redis cannot bridge to the newest version (snapshot v%d);"
                " keeping this catalog until a full snapshot is published",
                follower.current.version,
                snapshot.version,
            )
    return follower.current is not before


async def load_snapshot(client: aioredis.Redis) -> CatalogSnapshot:
    """The newest catalog in Redis: the stored snapshot with the log after it applied
    (an empty catalog if nothing was published yet)."""
    follower = CatalogFollower()
    await catch_up(client, follower)
    return follower.current


class CatalogWatcher:
    """Keeps the newest catalog of this process, following the log as changes are announced.

    ``current`` is always a complete snapshot; listeners registered with
    :meth:`on_change` are called with each new one. A periodic check covers a missed
    announcement (for example across a Redis reconnect).
    """

    def __init__(self, client: aioredis.Redis, *, resync_interval: float = 5.0) -> None:
        self._client = client
        self._resync_interval = resync_interval
        self._listeners: list[Callable[[CatalogSnapshot], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.follower = CatalogFollower()

    @property
    def current(self) -> CatalogSnapshot:
        """The newest catalog this process has."""
        return self.follower.current

    def on_change(self, listener: Callable[[CatalogSnapshot], None]) -> None:
        """Call ``listener`` with every snapshot that replaces the current one."""
        self._listeners.append(listener)

    def off_change(self, listener: Callable[[CatalogSnapshot], None]) -> None:
        """Stop calling ``listener`` (registered with :meth:`on_change`)."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    async def start(self) -> None:
        """Load the catalog and start following announcements."""
        await self.refresh()
        self._task = asyncio.create_task(self._follow(), name="catalog-watcher")

    async def stop(self) -> None:
        """Stop following announcements."""
        await cancel_and_wait(self._task)
        self._task = None

    async def refresh(self) -> None:
        """Catch up with the log now."""
        async with self._lock:
            if await catch_up(self._client, self.follower):
                snapshot = self.follower.current
                for listener in self._listeners:
                    listener(snapshot)

    async def _follow(self) -> None:
        while True:
            try:
                async with self._client.pubsub() as pubsub:
                    await pubsub.subscribe(INVALIDATION_CHANNEL)
                    await self.refresh()
                    while True:
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=self._resync_interval
                        )
                        drained = 0  # a burst of changes: catch up once for all of it
                        while message is not None and drained < 1_000:
                            message = await pubsub.get_message(
                                ignore_subscribe_messages=True, timeout=0
                            )
                            drained += 1
                        await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a Redis hiccup must not end the watcher
                log_retried(
                    log, exc, "catalog watcher lost Redis; retrying", unexpected=logging.ERROR
                )
                await asyncio.sleep(0.5)
