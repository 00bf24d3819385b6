"""Redis key names; every key a Lua script touches shares one hash tag.

* ``{t:<topic>:<partition>}`` — a partition: its stream, meta hash, per-consumer state
  (ack index, out-of-order acks, lock), queue-mode sets, transaction commit markers and
  the latest append request ids.
* ``{r:<topic>:<app>}`` — the retry store and dead-letter queue of one consumer group.
* ``{x:<topic>:<app>}`` — open transactions of one producer.
* ``{g:<topic>:<app>}`` — consumer group bookkeeping (broadcast registry, resend list,
  rate-limit bucket).
* ``{c:<minute>}``-free counters live under ``mq:cnt:…`` (plain keys, no script).
* ``mq:lost`` — messages retention took before a consumer group read them, not yet
  reported (:mod:`.retention`; a plain key).
* ``mq:exits`` — process exits a supervisor recorded for the alerts (:mod:`.exits`);
  ``mq:reports`` and ``mq:reports:<board>`` — what processes report about themselves
  (:mod:`.reports`). Plain keys.
* ``mq:cl:<app>`` — an app's client hosts: connections and last produce or consume per
  topic; ``mq:cl:apps`` — the apps that have some (:mod:`.clients`). Plain keys.
* ``{pr:<space>:<room>}`` — the members present in one room (:mod:`.presence`).
* ``{mb:<space>:<name>}`` — the owner of one named mailbox (:mod:`.mailbox`).
* ``{o:<topic>}`` — the partition counter of a topic's produce in turn (:mod:`.rotation`).
* ``{a:<topic>:<app>}`` — partition-group assignment of a group's members
  (:mod:`.assignment`).
* ``{holders}`` — the live lease holders (processes); ``{holder:<id>}`` — the consumer
  groups one of them leased from (:mod:`.holders`).

Topic and app names are restricted by the catalog to ``[A-Za-z0-9._-]``, so ``:`` and
``#`` are safe separators; a broadcast consumer id is ``<app>#<clientId>``.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "mq"
RETRY_PARTITION = 32767


def notify_channel(topic: str) -> str:
    """Pub/sub channel the append script publishes a partition number on."""
    return f"{PREFIX}:n:{topic}"


def consumer_id(app: str, client_id: str | None = None) -> str:
    """The state owner: the app for clustering, ``app#clientId`` for broadcast."""
    return app if client_id is None else f"{app}#{client_id}"


@dataclass(frozen=True, slots=True)
class PartitionKeys:
    """Keys of one partition, all in the slot of ``{t:<topic>:<partition>}``."""

    topic: str
    partition: int

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{t:{self.topic}:{self.partition}}}"

    @property
    def stream(self) -> str:
        return f"{self.tag}:s"

    @property
    def meta(self) -> str:
        return f"{self.tag}:m"

    def state(self, cid: str) -> str:
        """Hash: ack, lock owner/token/expiry/end, last access time and address."""
        return f"{self.tag}:c:{cid}"

    def acked(self, cid: str) -> str:
        """Sorted set of out-of-order acked ranges ``start:end`` scored by start."""
        return f"{self.tag}:o:{cid}"

    def range_starts(self, cid: str) -> str:
        """Sorted set of a group's in-flight and due ranges by start (:mod:`.groups`)."""
        return f"{self.tag}:rs:{cid}"

    def range_due(self, cid: str) -> str:
        """Sorted set of the same ranges by deadline or due time."""
        return f"{self.tag}:rd:{cid}"

    def ranges(self, cid: str) -> str:
        """Hash: range start → ``end|attempt|deadline|owner|flag|covered``."""
        return f"{self.tag}:rh:{cid}"

    @property
    def requests(self) -> str:
        """Sorted set of the latest append request ids, scored by the first index each
        got (what makes a repeated append idempotent, :mod:`brokers.engine.append`)."""
        return f"{self.tag}:rq"

    def tx_done(self, tx_id: str) -> str:
        """Marker of a transaction already committed into this partition."""
        return f"{self.tag}:x:{tx_id}"

    @property
    def q_ready(self) -> str:
        """Queue mode: ready message indexes, scored for dispatch order."""
        return f"{self.tag}:qr"

    @property
    def q_inflight(self) -> str:
        """Queue mode: delivered, unacked indexes scored by ack deadline."""
        return f"{self.tag}:qf"

    @property
    def q_delayed(self) -> str:
        """Queue mode: indexes waiting for a retry, scored by due time."""
        return f"{self.tag}:qd"

    @property
    def q_attempts(self) -> str:
        """Queue mode: delivery attempts per index."""
        return f"{self.tag}:qa"


@dataclass(frozen=True, slots=True)
class RetryKeys:
    """Retry store and dead-letter queue of (app, topic), slot ``{r:<topic>:<app>}``.

    A broadcast client (``member``) has retries of its own — what it failed, what is
    re-consumed for it — beside the group's, in the same slot; the retry ids (``seq``)
    and the dead letters stay the group's: one sequence, one dead-letter queue."""

    topic: str
    app: str
    member: str | None = None

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{r:{self.topic}:{self.app}}}"

    @property
    def own(self) -> str:
        """The prefix of the keys of the group's or the member's own retries (a member's
        name is length-prefixed: no name can end where another's keys begin)."""
        if self.member is None:
            return self.tag
        return f"{self.tag}:m:{len(self.member)}:{self.member}"

    @property
    def due(self) -> str:
        """Sorted set: retry id -> due time (ms), or lease expiry while delivered."""
        return f"{self.own}:due"

    @property
    def data(self) -> str:
        """Hash: retry id -> stored record bytes."""
        return f"{self.own}:data"

    @property
    def meta(self) -> str:
        """Hash: retry id -> ``attempts|partition|index|created_ms|reason``."""
        return f"{self.own}:meta"

    @property
    def seq(self) -> str:
        return f"{self.tag}:seq"

    @property
    def dlq(self) -> str:
        """Sorted set: dead letter id -> dead-lettered time (ms)."""
        return f"{self.tag}:dlq"

    @property
    def dlq_data(self) -> str:
        return f"{self.tag}:dlqd"

    def held(self, holder: str) -> str:
        """Sorted set: retry id -> lease expiry (ms), of the retries a lease holder
        (:mod:`~brokers.engine.holders`) leased: what is due again once it is gone, or
        (those of one connection) once that connection closes."""
        return f"{self.own}:held:{holder}"

    @property
    def dlq_meta(self) -> str:
        return f"{self.tag}:dlqm"


@dataclass(frozen=True, slots=True)
class TxKeys:
    """Transactions of (topic, app), slot ``{x:<topic>:<app>}``."""

    topic: str
    app: str

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{x:{self.topic}:{self.app}}}"

    @property
    def open(self) -> str:
        """Sorted set: txId -> deadline (start + timeout, ms)."""
        return f"{self.tag}:open"

    def meta(self, tx_id: str) -> str:
        return f"{self.tag}:h:{tx_id}"

    def log(self, tx_id: str) -> str:
        """List of ``<partition>|<record>`` entries produced into the transaction."""
        return f"{self.tag}:l:{tx_id}"

    @property
    def seq(self) -> str:
        return f"{self.tag}:seq"


@dataclass(frozen=True, slots=True)
class GroupKeys:
    """Consumer-group bookkeeping of (topic, app), slot ``{g:<topic>:<app>}``."""

    topic: str
    app: str

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{g:{self.topic}:{self.app}}}"

    @property
    def clients(self) -> str:
        """Broadcast client registry: clientId -> last access (ms)."""
        return f"{self.tag}:clients"

    @property
    def members(self) -> str:
        """Fan-out members of the group: member id -> when it last joined (ms); one that
        left for good is removed."""
        return f"{self.tag}:members"

    def resend(self, client_id: str | None) -> str:
        """Operator resend list of ``partition:index`` entries."""
        return f"{self.tag}:resend" + ("" if client_id is None else f":{client_id}")

    @property
    def bucket(self) -> str:
        """Token bucket of the consumer rate limit."""
        return f"{self.tag}:rate"


def producer_bucket(topic: str, app: str) -> str:
    """Token bucket of a producer rate limit (its own slot)."""
    return f"{PREFIX}:{{p:{topic}:{app}}}:rate"


def counter_key(dimension: str, name: str, day: str) -> str:
    """Per-day hash of per-minute counters for a topic, app or broker."""
    return f"{PREFIX}:cnt:{dimension}:{name}:{day}"


def presence_key(space: str, room: str) -> str:
    """Sorted set of the members present in ``room`` of ``space``, scored by expiry (ms)."""
    return f"{PREFIX}:{{pr:{space}:{room}}}"


def mailbox_key(space: str, name: str) -> str:
    """The owner entry of mailbox ``name`` of ``space`` (one key, its own hash tag)."""
    return f"{PREFIX}:{{mb:{space}:{name}}}"


def inbox_channel(space: str, owner: str) -> str:
    """Pub/sub channel on which ``owner`` hears the messages for its mailboxes of ``space``."""
    return f"{PREFIX}:ib:{space}:{owner}"


def group_tag(space: str, group: str) -> str:
    """The hash tag of ``group`` of ``space``: its channel's and its members' inboxes' (so
    that on a cluster one subscription on one node hears both, and ``PUBLISH`` to either
    counts their listeners, as it counts only those of the node it ran on)."""
    return f"{{gr:{space}:{group}}}"


def group_channel(space: str, group: str) -> str:
    """Pub/sub channel on which every member of ``group`` of ``space`` hears its broadcasts."""
    return f"{PREFIX}:gb:{group_tag(space, group)}"


def holders_key() -> str:
    """Sorted set of the lease-holding processes, scored by when they lapse (ms)."""
    return f"{PREFIX}:{{holders}}"


def holder_members_key(holder: str) -> str:
    """Hash of the fan-out members that end with ``holder`` (a connection's own, or a
    durable one to keep a while): member record -> how long its progress is kept when it
    leaves (ms, or ``-``: not at all)."""
    return f"{PREFIX}:{{holder:{holder}}}:members"


def holder_groups_key(holder: str) -> str:
    """Sorted set of the consumer groups ``holder`` leased from, scored by when the last of
    those leases ends (ms)."""
    return f"{PREFIX}:{{holder:{holder}}}:groups"


def turn_key(topic: str) -> str:
    """Counter of the produces that took ``topic``'s partitions in turn."""
    return f"{PREFIX}:{{o:{topic}}}:turn"


@dataclass(frozen=True, slots=True)
class AssignmentKeys:
    """Partition-group assignment of (topic, app), slot ``{a:<topic>:<app>}``."""

    topic: str
    app: str

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{a:{self.topic}:{self.app}}}"

    @property
    def members(self) -> str:
        """Sorted set: member -> expiry (ms)."""
        return f"{self.tag}:members"

    @property
    def assigned(self) -> str:
        """Hash: member -> comma-separated partition-group ids."""
        return f"{self.tag}:assign"
