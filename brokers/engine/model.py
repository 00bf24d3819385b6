"""Result and option types of the engine's public API (plain, immutable structs)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from brokers.engine.record import StoredMessage, decode_record


class QoS(enum.IntEnum):
    """Durability a produce waits for (see :mod:`brokers.engine.append`)."""

    NONE = 0
    RECEIVED = 1
    PERSISTED = 2
    REPLICATED = 3


class RetryType(enum.IntEnum):
    """JMQ4 COMMIT_ACK retryType."""

    NONE = 0
    TIMEOUT = 1
    EXCEPTION = 2
    OTHER = 3


class FetchStatus(enum.StrEnum):
    """Outcome of a fetch."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # every free partition is at its end (or delayed)
    NO_PARTITION = "NO_PARTITION"  # every partition is locked by others: none could be
    PAUSED = "PAUSED"
    BLACKLISTED = "BLACKLISTED"
    RATE_LIMITED = "RATE_LIMITED"
    CORRECTED = "CORRECTED"
    """The consumer's ack index lay outside the partition (retention took what it had not
    acked, or it was committed past the end) and was moved to ``ack_index``; the
    partition is locked over nothing so the client can confirm the move (only for fetches
    that asked for it, :meth:`~brokers.engine.Engine.commit_and_fetch`)."""


@dataclass(slots=True)
class AppendResult:
    """Where one append call stored its messages (one partition per call).

    A value, not frozen for the reason :class:`Delivery` gives: ``append_many`` makes one
    per message stored (a frozen one took 0.86 µs to make, this one 0.18 µs — 3.5% of a
    VibeMQ publish)."""

    topic: str
    partition: int
    first_index: int
    indexes: tuple[int, ...]  # first index of each message (a batch: its first item)
    count: int  # indexes taken
    store_time_ms: int
    dropped: bool = False  # queue overflow DropNewest
    dead_lettered: bool = False  # queue overflow RedirectToDlq


@dataclass(slots=True)
class Delivery:
    """One delivered record: a message or a batch (``count`` consecutive indexes).

    A value: nothing changes a delivery once made. It is not frozen only because a fetch
    makes one per record read (32 per HTTP-MQ request, thousands per second on a stream)
    and a frozen dataclass's constructor costs four times as much.

    For a retry delivery ``partition`` is 32767, ``index`` the retry id, and ``origin``
    the (partition, index) it was first stored at; ``record`` already carries them.
    """

    partition: int
    index: int
    count: int
    record: bytes
    origin: tuple[int, int] | None = None
    attempts: int = 0
    redelivered: bool = False
    """Delivered before (released by a consumer that went away, or failed)."""

    @property
    def message(self) -> StoredMessage:
        return decode_record(self.record)

    @property
    def end(self) -> int:
        return self.index + self.count


class StoredEntry(NamedTuple):
    """One stored append: ``records`` are its records back to back (JMQ4 layout, each
    starting with its size), taking ``count`` indexes from ``index`` (a batch record takes
    its ``flag``). What :meth:`Engine.read_entries` returns to bulk readers."""

    index: int
    count: int
    records: bytes


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What a consumer fetch returned.

    While ``lock_token`` is non-zero the partition is locked for this consumer until
    ``lock_expires_ms``; ``start`` is the ack index the read started from and ``end`` the
    index right after the batch (HTTP-MQ offset / nextOffset). ``retry_after_ms`` is a
    hint: when a locked or delayed partition may become servable.

    A batch from a partition also says where that partition stood when it was read, as
    the lock-and-read script saw it (so a caller reporting progress needs no second
    read): ``ack_index`` (the consumer's, -1 for retries), ``max_index`` (the partition's
    next index) and ``accessed_ms`` (the access time recorded with it).
    """

    status: FetchStatus
    topic: str
    partition: int = -1
    messages: tuple[Delivery, ...] = ()
    lock_token: int = 0
    lock_expires_ms: int = 0
    start: int = -1
    end: int = -1
    retry_after_ms: int | None = None
    first_consume: bool = False
    ack_index: int = -1
    max_index: int = -1
    accessed_ms: int = 0
    lapsed: int = 0
    """Messages of an earlier batch whose lock ran out before they were acked, found by
    this fetch taking the partition over: the consumer failed them (counted once)."""
    corrected_from: int = -1
    """The consumer's ack index when this fetch found it outside the partition — below
    its min (retention took messages it had not acked) or past its end — and moved it to
    ``ack_index`` (HTTP-MQ OFFSET_ILLEGAL); -1 when it was inside."""

    @property
    def found(self) -> bool:
        return self.status is FetchStatus.FOUND


@dataclass(frozen=True, slots=True)
class PullResult:
    """What :meth:`Engine.commit_and_fetch` did: the commit's outcome (None when there was
    none, or when it was rejected without running: ``commit_error`` says why), the
    fetch, and the queued resends it took."""

    commit: CommitResult | None
    fetched: FetchResult
    resends: tuple[Delivery, ...] = ()
    commit_error: str | None = None


class AckStatus(enum.StrEnum):
    """Outcome of a JMQ4-style ack."""

    OK = "OK"  # ack index moved over the range
    PENDING = "PENDING"  # kept as out-of-order ack until the prefix completes
    IGNORED = "IGNORED"  # range not at the ack index and no lock held (reference: code 0)
    ALREADY = "ALREADY"  # range already acked
    STALE_LOCK = "STALE_LOCK"  # a newer lock owns the partition
    REDELIVER = "REDELIVER"  # retry not possible: lock released, range comes back


@dataclass(frozen=True, slots=True)
class AckResult:
    status: AckStatus
    ack_index: int
    retry_ids: tuple[int, ...] = ()
    dead_lettered: int = 0


class CommitStatus(enum.StrEnum):
    """Outcome of an HTTP-MQ requestId acknowledgement (http-mq.md §7)."""

    OK = "ok"
    LOCK_NOT_EXIST = "lock not exist"
    LOCK_STALE = "ack lockTime small than"
    COMMITTED = "offset has committed"
    NOT_EQUAL = "committedOffset not equal"


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """An HTTP-MQ acknowledgement (http-mq.md §7): the requestId's partition, batch
    start (``offset``) and end (``next_offset``), its lock token and forceAck."""

    partition: int
    offset: int
    next_offset: int
    lock_time: int
    force: bool = False


@dataclass(frozen=True, slots=True)
class CommitResult:
    status: CommitStatus
    committed: int  # ack index after the call (-1 unknown)
    stored_lock: int = 0  # lock token found (HTTP-MQ lockTime)
    lock_expired: bool = False
    anomaly: bool = False  # request carried a newer lock than stored
    moved_from: int = -1
    """The committed offset a forceAck moved away from other than by a batch's progress
    (from the committed offset forward): the client rewound or skipped; -1: none."""

    @property
    def applied(self) -> bool:
        return self.status is CommitStatus.OK


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """Progress of one consumer on one partition."""

    topic: str
    partition: int
    min_index: int
    max_index: int  # next index to be written
    ack_index: int  # -1 when the consumer never touched the partition
    lag: int
    lock_owner: str = ""
    lock_token: int = 0
    lock_expires_ms: int = 0
    last_access_ms: int = 0
    last_address: str = ""
    pending_acks: int = 0  # out-of-order acked indexes beyond the ack index


@dataclass(frozen=True, slots=True)
class RetryRecord:
    """A message in the retry store or the dead-letter queue."""

    id: int
    partition: int
    index: int
    attempts: int
    created_ms: int
    reason: str
    due_ms: int
    record: bytes = field(repr=False)

    @property
    def message(self) -> StoredMessage:
        return decode_record(self.record)


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    tx_id: str
    topic: str
    app: str
    transaction_id: str
    start_ms: int
    timeout_ms: int
    messages: int
