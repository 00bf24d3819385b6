"""``manage.py migratedelivery [--dry-run]``: move the old queue-only store into consumer groups.

Until issue 17, zbus MQs and VibeMQ queues were consumed through a store of their own
next to each partition's stream: ready, in-flight, delayed and dead sorted sets of message
indexes (``{t:<topic>:<p>}:qr|qf|qd|qx``, attempts in ``qa``), per-subscriber fan-out
copies (``{f:<queue>}``) and zbus's ``zbus:redelivered:{<mq>}`` marks. The messages
themselves were always in the stream, at those indexes. This command moves the
progress, so nothing that was stored and not acknowledged is lost:

* each clustering consumer group of the topic gets the unsettled indexes (ready, in
  flight, delayed) as ranges due at once — never-delivered ones fresh, the others marked
  redelivered with their attempt counts — with its cursor at the partition's end (a topic
  with several groups gives each one its own copy: at least once);
* messages waiting to be dead-lettered are dead-lettered now (the topic's DLQ, else the
  group's dead-letter queue);
* a durable fan-out subscriber (``<app>#<clientId>``) gets its pending copies as its own
  member ranges, and the queue's dispatch mark goes past what was already fanned out;
  connection-bound subscribers (``#~…``) are gone with their connections;
* the old keys are deleted.

It is idempotent (a second run finds no old keys) and ``--dry-run`` only reports.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import redis.asyncio as aioredis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from brokers.catalog_loader import build_snapshot
from brokers.engine import CatalogSnapshot, Engine, seed_group

OLD_SETS = ("qr", "qf", "qd")
FAN_OUT = ("FanOutWithAck", "FanOutWithoutAck")


class Command(BaseCommand):
    help = "Move the old queue-only store (zbus MQs, VibeMQ queues) into consumer groups."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Report, change nothing.")

    def handle(self, *args: object, **options: object) -> None:
        report = asyncio.run(migrate(build_snapshot(), dry_run=bool(options["dry_run"])))
        for line in report:
            self.stdout.write(line)
        if not report:
            self.stdout.write("nothing to migrate")


def _runs(indexes: dict[int, tuple[int, bool]]) -> list[tuple[int, int, int, bool]]:
    """Sorted ``index → (attempt, delivered)`` as runs of one attempt and state."""
    out: list[tuple[int, int, int, bool]] = []
    for i in sorted(indexes):
        attempt, delivered = indexes[i]
        if out and out[-1][1] == i and out[-1][2:] == (attempt, delivered):
            out[-1] = (out[-1][0], i + 1, attempt, delivered)
        else:
            out.append((i, i + 1, attempt, delivered))
    return out


async def migrate(snapshot: CatalogSnapshot, *, dry_run: bool = False) -> list[str]:
    """Migrate every old queue key of the Redis of ``settings.REDIS_URL``; report lines."""
    client = aioredis.from_url(settings.REDIS_URL)
    engine = Engine(client, lambda: snapshot)
    report: list[str] = []
    try:
        partitions: set[tuple[str, int]] = set()
        async for key in client.scan_iter(match="mq:{t:*}:q*", count=1000):
            tag = key.decode().split("}", 1)[0]  # mq:{t:<topic>:<p>
            topic, _, part = tag[len("mq:{t:") :].rpartition(":")
            if part.isdigit():
                partitions.add((topic, int(part)))
        for topic, p in sorted(partitions):
            report += await _migrate_partition(engine, snapshot, topic, p, dry_run)
        queues: set[str] = set()
        async for key in client.scan_iter(match="mq:{f:*}:k", count=1000):
            queues.add(key.decode()[len("mq:{f:") : -len("}:k")])
        for queue in sorted(queues):
            report += await _migrate_copies(engine, queue, dry_run)
        async for key in client.scan_iter(match="zbus:redelivered:*", count=1000):
            report.append(f"{key.decode()}: deleted (the engine marks redeliveries now)")
            if not dry_run:
                await client.delete(key)
    finally:
        await engine.close()
        await client.aclose()
    return report


async def _migrate_partition(
    engine: Engine, snapshot: CatalogSnapshot, topic: str, p: int, dry_run: bool
) -> list[str]:
    client = engine.redis
    tag = f"mq:{{t:{topic}:{p}}}"
    ready = [int(m) for m in await client.zrange(f"{tag}:qr", 0, -1)]
    inflight = [int(m) for m in await client.zrange(f"{tag}:qf", 0, -1)]
    delayed = [int(m) for m in await client.zrange(f"{tag}:qd", 0, -1)]
    attempts = {int(k): int(v) for k, v in (await client.hgetall(f"{tag}:qa")).items()}
    dead = [m.decode() for m in await client.zrange(f"{tag}:qx", 0, -1)]
    unsettled: dict[int, tuple[int, bool]] = {i: (1, False) for i in ready}
    for i in (*inflight, *delayed):
        unsettled[i] = (max(1, attempts.get(i, 1)), True)
    info = snapshot.topics.get(topic)
    fan_out = info is not None and info.queue.delivery_mode in FAN_OUT
    groups = (
        []
        if info is None or fan_out
        else [c.app for c in snapshot.consumers_of(topic) if not c.broadcast]
    )
    lines = [
        f"{topic}/{p}: {len(unsettled)} unsettled ({len(ready)} ready, {len(inflight)} in flight,"
        f" {len(delayed)} delayed), {len(dead)} to dead-letter → groups {groups or 'none'}"
    ]
    if dry_run:
        return lines
    if fan_out:  # not yet fanned out: the next subscribers' (members start at the mark)
        meta = f"mq:{{t:{topic}:{p}}}:m"
        mark = min(ready) if ready else int(await client.hget(meta, "next") or 0)
        await client.hset(meta, "fan", mark)
    elif unsettled and not groups:
        lines.append(f"{topic}/{p}: no consumer group in the catalog: old keys kept")
        return lines
    runs = _runs(unsettled)
    for app in groups:
        await seed_group(client, topic, p, app, runs, now_ms=engine.now_ms())
    for member in dead:  # "<index>|<attempts>|<reason>"
        idx, attempts, reason = [*member.split("|", 2), "", ""][:3]
        if info is None or not idx.isdigit():
            continue
        for d in await engine.read(topic, p, int(idx), 1):
            if d.index == int(idx):
                app = groups[0] if groups else info.anonymous_app
                n = int(attempts) if attempts.isdigit() else 0
                await engine.dead_letter(topic, app, d, reason or "MaxRetriesExceeded", n)
    await client.delete(*(f"{tag}:{k}" for k in (*OLD_SETS, "qa", "qx", "qs")))
    return lines


async def _migrate_copies(engine: Engine, queue: str, dry_run: bool) -> list[str]:
    client = engine.redis
    prefix = f"mq:{{f:{queue}}}"
    lines = []
    identities = [m.decode() for m in await client.smembers(f"{prefix}:k")]
    per_identity: dict[str, dict[int, tuple[int, bool]]] = defaultdict(dict)
    for identity in identities:
        if "#~" in identity:  # bound to a connection that is gone
            continue
        attempts = {
            int(k): int(v) for k, v in (await client.hgetall(f"{prefix}:a:{identity}")).items()
        }
        for part in "rdf":
            for m in await client.zrange(f"{prefix}:{part}:{identity}", 0, -1):
                i = int(m)
                n = attempts.get(i, 0)
                per_identity[identity][i] = (max(1, n), n > 0)
    lines.append(
        f"{queue}: fan-out copies of {len(per_identity)} durable subscribers"
        f" ({sum(map(len, per_identity.values()))} messages)"
    )
    if dry_run:
        return lines
    for identity, pending in per_identity.items():
        await seed_group(client, queue, 0, identity, _runs(pending), now_ms=engine.now_ms())
    # what the old store had fanned out is no one's to join: the dispatch mark is the end
    # (unless the queue's own migration set it where its unsent messages start)
    meta = f"mq:{{t:{queue}:0}}:m"
    await client.hsetnx(meta, "fan", int(await client.hget(meta, "next") or 0))
    keys = [f"{prefix}:m", f"{prefix}:k"]
    for identity in identities:
        keys += [f"{prefix}:{part}:{identity}" for part in "eardf"]
    await client.delete(*keys)
    return lines
