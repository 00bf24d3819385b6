"""Clients: which hosts of an app are connected, with what client, and what they produced
to or consumed from lately — whatever the protocol.

The console's "verify producer" (does this producer have live clients?) and its client
inventory (which apps run which client versions and languages) read this; the platform
team needs both before it moves, upgrades or retires anything.

Two sources, both in process memory until a flush:

* the gate (:mod:`.access`) notes every produce or consume it lets through for a client
  address — ``(app, address, topic, role)`` in a set, no clock read, no I/O;
* a front-end describes a client (per app and host: the newest description wins) when it
  connects (:meth:`Clients.connected`: protocol, language and version as the client
  stated them, counted as a live connection until :meth:`Clients.disconnected`) or, for
  a protocol without connections, with each request (:meth:`Clients.described`).

A flush (at most every ``interval_s``, started by the first change after the last one)
writes one hash per app, ``mq:cl:<app>`` (a plain key, kept a week after its last
write), with two kinds of fields:

* ``c|<holder>|<host>|<protocol>|<language>|<version>`` → live connections: this
  process's (its lease-holder id, :mod:`.holders`); a row of a holder that is not live
  (the process died, or closed) counts nothing and is deleted when read;
* ``a|<host>|<protocol>|<language>|<version>|<topic>|<role>`` → when that client last
  produced to or consumed from the topic (ms, to the flush; written again at most every
  ``ACTIVITY_REFRESH_MS``); deleted when read a week later.

The apps with rows are the set ``mq:cl:apps``, so the inventory reads them without a scan.
Names of topics and apps never hold ``|`` (the catalog's rule); what clients state is
cut to printable text without ``|``, at most ``TEXT_MAX`` characters.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from brokers.engine.access import host_of
from brokers.engine.flush_timer import FlushTimer
from brokers.engine.keys import PREFIX, holders_key
from brokers.engine.redisio import AnyRedis

log = logging.getLogger("mqcloud.engine")

APPS_KEY = f"{PREFIX}:cl:apps"
KEEP_MS = 7 * 24 * 3600 * 1000
"""How long a client's last produce or consume is remembered."""
TEXT_MAX = 64
ACTIVITY_REFRESH_MS = 30_000
"""A client's last produce or consume on a topic is written again at most this often
(what a row shows is at most this old while the client goes on): the store's load is
the number of active rows per half minute, not the traffic."""
WRITE_CHUNK = 500
"""Apps written per pipelined round trip."""
KINDS_MAX = 20_000
"""What clients said they are, per app and host, remembered per process (the newest)."""


def app_key(app: str) -> str:
    """Hash of ``app``'s client rows."""
    return f"{PREFIX}:cl:{app}"


def host(address: str) -> str:
    """The host a row names for a client ``address`` (``host``, ``host:port`` or
    ``[v6]:port``; a forwarded address is cleaned as what clients state is)."""
    return clean(host_of(address))


def clean(text: str | None) -> str:
    """What a client stated, fit for a row: printable, no ``|``, at most ``TEXT_MAX``."""
    if not text:
        return ""
    out = "".join(c for c in str(text) if c.isprintable() and c != "|")
    return out.strip()[:TEXT_MAX]


@dataclass(frozen=True, slots=True)
class Kind:
    """What a client said it is."""

    protocol: str
    language: str = ""
    version: str = ""


UNSAID = Kind("")
"""A client whose front-end said nothing of it."""


@dataclass(slots=True)
class ClientRow:
    """One client host of an app with one kind of client: its live connections (over
    every process) and the topics it produced to or consumed from, with when it last
    did, newest first."""

    host: str
    protocol: str
    language: str
    version: str
    connections: int = 0
    topics: list[tuple[str, str, int]] = field(default_factory=list)
    """(topic, role, last ms): role ``produce`` or ``consume``."""

    @property
    def last_ms(self) -> int:
        """When it last produced or consumed (0: never, it only connected)."""
        return max((t[2] for t in self.topics), default=0)


@dataclass(slots=True)
class InventoryRow:
    """One kind of client (protocol, language, version) across the platform."""

    protocol: str
    language: str
    version: str
    apps: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    connections: int = 0
    last_ms: int = 0


class Clients:
    """One process's view of its clients, flushed to the store; and the reads."""

    def __init__(
        self,
        redis: AnyRedis,
        holder_id: Callable[[], str],
        start_holder: Callable[[], None],
        *,
        clock: Callable[[], float] = time.time,
        interval_s: float = 2.0,
    ) -> None:
        self._redis = redis
        self._holder_id = holder_id
        self._start_holder = start_holder
        self._clock = clock
        self._active: set[tuple[str, str, str, str]] = set()
        """(app, address, topic, role) let through since the last flush."""
        self._kinds: dict[tuple[str, str], Kind] = {}
        """(app, host) → what its client last said it is, the newest last."""
        self._connections: dict[str, tuple[str, Kind]] = {}
        """live connection address → (app, kind)."""
        self._counted: dict[tuple[str, str, Kind], int] = {}
        """(app, host, kind) → connections the store shows for this process."""
        self._written: dict[tuple[str, str], int] = {}
        """(app, activity field) → when this process last wrote it."""
        self._dirty = False
        self._flusher = FlushTimer(self.flush, interval_s)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ------------------------------------------------------------------ noting

    def seen(self, app: str, address: str, topic: str, role: str) -> None:
        """The gate let ``app``'s client at ``address`` produce to or consume from
        ``topic`` (``role``) now."""
        self._active.add((app, address, topic, role))
        self._flusher.request()

    def _know(self, app: str, address: str, kind: Kind) -> None:
        key = (app, host(address))
        self._kinds.pop(key, None)
        self._kinds[key] = kind  # the newest last
        if len(self._kinds) > KINDS_MAX:
            del self._kinds[next(iter(self._kinds))]

    def connected(
        self, address: str, app: str, protocol: str, language: str = "", version: str = ""
    ) -> None:
        """A connection of ``app``'s client from ``address`` opened (or said who it is):
        a live connection until :meth:`disconnected`. Saying it again replaces what it
        said before."""
        kind = Kind(clean(protocol), clean(language), clean(version))
        self._connections[address] = (app, kind)
        self._know(app, address, kind)
        self._dirty = True
        self._start_holder()
        self._flusher.request()

    def disconnected(self, address: str) -> None:
        """The connection from ``address`` closed (nothing if it never said who it is)."""
        if self._connections.pop(address, None) is not None:
            self._dirty = True
            self._flusher.request()

    def described(
        self, address: str, app: str, protocol: str, language: str = "", version: str = ""
    ) -> None:
        """A client of ``app`` without a connection (one request) from ``address`` said
        what it is."""
        kind = Kind(clean(protocol), clean(language), clean(version))
        if self._kinds.get((app, host(address))) != kind:
            self._know(app, address, kind)

    # ------------------------------------------------------------------ flushing

    def _connection_counts(self) -> dict[tuple[str, str, Kind], int]:
        counts: dict[tuple[str, str, Kind], int] = defaultdict(int)
        for address, (app, kind) in self._connections.items():
            counts[(app, host(address), kind)] += 1
        return counts

    async def flush(self) -> None:
        """Write what changed since the last flush: one pipelined round trip."""
        active, self._active = self._active, set()
        dirty, self._dirty = self._dirty, False
        if not active and not dirty:
            return
        try:
            await self._write(active, dirty)
        except (RedisError, OSError) as exc:  # kept for the next flush
            log.info("client rows not written, retrying: %s", exc)
            self._active |= active
            self._dirty = self._dirty or dirty
        if self._active or self._dirty:
            self._flusher.retry()

    async def _write(self, active: set[tuple[str, str, str, str]], dirty: bool) -> None:
        """Per app one HSET of its changed fields, one HDEL of its withdrawn ones and one
        EXPIRE, ``WRITE_CHUNK`` apps per pipelined round trip (a process starting with
        thousands of clients does not hold its event loop for one huge pipeline)."""
        now = self._now_ms()
        holder = self._holder_id()
        sets: dict[str, dict[str, int]] = defaultdict(dict)
        dels: dict[str, list[str]] = defaultdict(list)
        counts = self._connection_counts() if dirty else self._counted
        if dirty:
            for key in set(self._counted) | set(counts):
                app, where, kind = key
                name = f"c|{holder}|{where}|{kind.protocol}|{kind.language}|{kind.version}"
                n = counts.get(key, 0)
                if n:
                    sets[app][name] = n
                else:
                    dels[app].append(name)
        rows: dict[tuple[str, str], int] = {}
        fresh = now - ACTIVITY_REFRESH_MS
        for app, address, topic, role in active:
            where = host(address)
            kind = self._kinds.get((app, where), UNSAID)
            name = f"a|{where}|{kind.protocol}|{kind.language}|{kind.version}|{topic}|{role}"
            if self._written.get((app, name), fresh) <= fresh:
                rows[(app, name)] = now
                sets[app][name] = now
        apps = sorted(set(sets) | set(dels))
        for at in range(0, len(apps), WRITE_CHUNK):
            chunk = apps[at : at + WRITE_CHUNK]
            pipe = self._redis.pipeline(transaction=False)
            for app in chunk:
                if sets.get(app):
                    pipe.hset(app_key(app), mapping=sets[app])
                if dels.get(app):
                    pipe.hdel(app_key(app), *dels[app])
                pipe.expire(app_key(app), KEEP_MS // 1000)
            pipe.sadd(APPS_KEY, *chunk)
            await pipe.execute()
        self._counted = dict(counts)
        self._written.update(rows)
        if len(self._written) > KINDS_MAX:
            self._written = {k: t for k, t in self._written.items() if t > fresh}

    async def close(self) -> None:
        """Withdraw this process's connections (they end with it) and flush the rest."""
        await self._flusher.close()
        if self._connections:
            self._connections.clear()
            self._dirty = True
        with contextlib.suppress(RedisError, OSError):
            await self.flush()

    # ------------------------------------------------------------------ reading

    async def _live_holders(self, holders: Iterable[str]) -> set[str]:
        names = sorted(set(holders))
        if not names:
            return set()
        scores = await self._redis.zmscore(holders_key(), names)
        now = self._now_ms()
        return {h for h, s in zip(names, scores, strict=True) if s is not None and s > now}

    async def of_apps(self, apps: Iterable[str]) -> dict[str, list[ClientRow]]:
        """Each app's clients, by host and kind; rows of dead processes and activity a
        week old are deleted on the way. One round trip to read, one to clean."""
        apps = list(dict.fromkeys(apps))
        if not apps:
            return {}
        pipe = self._redis.pipeline(transaction=False)
        for app in apps:
            pipe.hgetall(app_key(app))
        raw: list[dict[bytes, bytes]] = await pipe.execute()
        holders = {
            f.split(b"|", 2)[1].decode() for fields in raw for f in fields if f.startswith(b"c|")
        }
        live = await self._live_holders(holders)
        now = self._now_ms()
        stale: list[tuple[str, bytes]] = []
        out: dict[str, list[ClientRow]] = {}
        for app, fields in zip(apps, raw, strict=True):
            rows: dict[tuple[str, str, str, str], ClientRow] = {}
            for f, v in fields.items():
                parts = f.decode(errors="replace").split("|")
                if parts[0] == "c" and len(parts) == 6:
                    if parts[1] not in live:
                        stale.append((app, f))
                        continue
                    _, _, where, proto, lang, ver = parts
                    row = rows.setdefault(
                        (where, proto, lang, ver), ClientRow(where, proto, lang, ver)
                    )
                    row.connections += int(v)
                elif parts[0] == "a" and len(parts) == 7:
                    _, where, proto, lang, ver, topic, role = parts
                    at = int(v)
                    if at < now - KEEP_MS:
                        stale.append((app, f))
                        continue
                    row = rows.setdefault(
                        (where, proto, lang, ver), ClientRow(where, proto, lang, ver)
                    )
                    row.topics.append((topic, role, at))
                else:
                    stale.append((app, f))
            for row in rows.values():
                row.topics.sort(key=lambda t: (-t[2], t[0], t[1]))
            out[app] = sorted(
                rows.values(), key=lambda r: (-r.connections, -r.last_ms, r.host, r.protocol)
            )
        if stale or any(not fields for fields in raw):
            pipe = self._redis.pipeline(transaction=False)
            for app, f in stale:
                pipe.hdel(app_key(app), f)
            gone = [app for app, fields in zip(apps, raw, strict=True) if not fields]
            if gone:
                pipe.srem(APPS_KEY, *gone)
            with contextlib.suppress(RedisError, OSError):
                await pipe.execute()
        return out

    async def apps(self) -> list[str]:
        """The apps with client rows."""
        return sorted(m.decode() for m in await self._redis.smembers(APPS_KEY))

    async def inventory(self) -> list[InventoryRow]:
        """Every kind of client on the platform (protocol, language, version) with the
        apps and hosts that run it, their live connections and when one was last active;
        the most connected first."""
        kinds: dict[tuple[str, str, str], InventoryRow] = {}
        for app, rows in (await self.of_apps(await self.apps())).items():
            for r in rows:
                inv = kinds.setdefault(
                    (r.protocol, r.language, r.version),
                    InventoryRow(r.protocol, r.language, r.version),
                )
                inv.apps.add(app)
                inv.hosts.add(r.host)
                inv.connections += r.connections
                inv.last_ms = max(inv.last_ms, r.last_ms)
        return sorted(
            kinds.values(),
            key=lambda i: (-i.connections, -len(i.apps), i.protocol, i.language, i.version),
        )
