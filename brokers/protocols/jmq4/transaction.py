"""Transaction commands (spec §5.7): PRODUCE_MESSAGE_PREPARE, _COMMIT, _ROLLBACK and
FETCH_PRODUCE_FEEDBACK."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

from brokers.protocols.jmq4.codes import Code, CommandType
from brokers.protocols.jmq4.common import read_code, write_code
from brokers.protocols.jmq4.payload import Payload
from brokers.protocols.jmq4.primitives import Reader, Writer


class TransactionStatus(IntEnum):
    """FETCH_PRODUCE_FEEDBACK ``status``: reserved and ignored, so not validated."""

    UNKNOWN = 0
    PREPARE = 1
    COMMITTED = 2
    ROLLBACK = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class PrepareRequest(Payload):
    """PRODUCE_MESSAGE_PREPARE (51); ``transaction_id`` is the client's optional query id."""

    TYPE = CommandType.PRODUCE_MESSAGE_PREPARE

    topic: str = ""
    app: str = ""
    sequence: int = 0
    transaction_id: str = ""
    timeout: int = 0

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_s2(self.topic)
        w.write_s2(self.app)
        w.write_long(self.sequence)
        w.write_s2(self.transaction_id)
        w.write_int(self.timeout)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(
            topic=r.read_s2(),
            app=r.read_s2(),
            sequence=r.read_long(),
            transaction_id=r.read_s2(),
            timeout=r.read_int(),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PrepareResponse(Payload):
    """PRODUCE_MESSAGE_PREPARE response (−51): ``txId S2, code INT``."""

    TYPE = CommandType.PRODUCE_MESSAGE_PREPARE_RESPONSE

    tx_id: str = ""
    code: int = Code.SUCCESS

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_s2(self.tx_id)
        write_code(w, self.code)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(tx_id=r.read_s2(), code=read_code(r))


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionEndRequest(Payload):
    """``topic S2, app S2, txId S2``: the COMMIT and ROLLBACK requests."""

    topic: str = ""
    app: str = ""
    tx_id: str = ""

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_s2(self.topic)
        w.write_s2(self.app)
        w.write_s2(self.tx_id)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topic=r.read_s2(), app=r.read_s2(), tx_id=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeResponse(Payload):
    """``code INT``: the COMMIT and ROLLBACK responses."""

    code: int = Code.SUCCESS

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        write_code(w, self.code)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(code=read_code(r))


@dataclass(frozen=True, slots=True)
class CommitRequest(TransactionEndRequest):
    """PRODUCE_MESSAGE_COMMIT (52)."""

    TYPE = CommandType.PRODUCE_MESSAGE_COMMIT


@dataclass(frozen=True, slots=True)
class CommitResponse(CodeResponse):
    """PRODUCE_MESSAGE_COMMIT response (−52)."""

    TYPE = CommandType.PRODUCE_MESSAGE_COMMIT_RESPONSE


@dataclass(frozen=True, slots=True)
class RollbackRequest(TransactionEndRequest):
    """PRODUCE_MESSAGE_ROLLBACK (53)."""

    TYPE = CommandType.PRODUCE_MESSAGE_ROLLBACK


@dataclass(frozen=True, slots=True)
class RollbackResponse(CodeResponse):
    """PRODUCE_MESSAGE_ROLLBACK response (−53)."""

    TYPE = CommandType.PRODUCE_MESSAGE_ROLLBACK_RESPONSE


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchProduceFeedbackRequest(Payload):
    """FETCH_PRODUCE_FEEDBACK (54): ``app S2, topic S2, status BYTE, longPollTimeout INT``."""

    TYPE = CommandType.FETCH_PRODUCE_FEEDBACK

    app: str = ""
    topic: str = ""
    status: int = TransactionStatus.UNKNOWN
    long_poll_timeout: int = 0

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_s2(self.app)
        w.write_s2(self.topic)
        w.write_byte(self.status)
        w.write_int(self.long_poll_timeout)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(
            app=r.read_s2(), topic=r.read_s2(), status=r.read_byte(), long_poll_timeout=r.read_int()
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackEntry:
    """An open transaction returned by FETCH_PRODUCE_FEEDBACK."""

    topic: str = ""
    tx_id: str = ""
    transaction_id: str = ""


def _write_feedback(w: Writer, entry: FeedbackEntry) -> None:
    w.write_s2(entry.topic)
    w.write_s2(entry.tx_id)
    w.write_s2(entry.transaction_id)


def _read_feedback(r: Reader) -> FeedbackEntry:
    return FeedbackEntry(topic=r.read_s2(), tx_id=r.read_s2(), transaction_id=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchProduceFeedbackResponse(Payload):
    """FETCH_PRODUCE_FEEDBACK response (−54): ``A{topic, txId, transactionId}, code INT``."""

    TYPE = CommandType.FETCH_PRODUCE_FEEDBACK_RESPONSE

    entries: tuple[FeedbackEntry, ...] = ()
    code: int = Code.SUCCESS

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.entries, _write_feedback)
        write_code(w, self.code)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(entries=r.read_array(_read_feedback), code=read_code(r))
