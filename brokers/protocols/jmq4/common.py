"""Payload shapes shared by several commands: ``A{topic S2}, app S2`` requests and the
ADD_CONSUMER / ADD_PRODUCER registration request and response (spec §5.2–§5.4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from brokers.protocols.jmq4.codes import Code
from brokers.protocols.jmq4.errors import EncodeError
from brokers.protocols.jmq4.payload import Payload
from brokers.protocols.jmq4.primitives import Reader, Writer

_CODES = {member.value: member for member in Code}


def write_code(w: Writer, code: int) -> None:
    """Write a payload ``code INT``; only §7 codes may be sent (the Java client NPEs on others)."""
    if code not in _CODES:
        raise EncodeError(f"{code!r} is not a JMQ4 code (§7)")
    w.write_int(code)


def read_code(r: Reader) -> int:
    """Read a payload ``code INT`` (a :class:`Code` when known, the raw int otherwise)."""
    raw = r.read_int()
    return _CODES.get(raw, raw)


def write_s2_item(w: Writer, text: str) -> None:
    """Array item writer for a bare S2 string."""
    w.write_s2(text)


def read_s2_item(r: Reader) -> str:
    """Array item reader for a bare S2 string."""
    return r.read_s2()


def write_short_item(w: Writer, value: int) -> None:
    """Array item writer for a bare SHORT."""
    w.write_short(value)


def read_short_item(r: Reader) -> int:
    """Array item reader for a bare SHORT."""
    return r.read_short()


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicListRequest(Payload):
    """``A{topic S2}, app S2``: REMOVE_CONSUMER/PRODUCER, FETCH_CLUSTER, FIND_COORDINATOR."""

    topics: tuple[str, ...] = ()
    app: str = ""

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, write_s2_item)
        w.write_s2(self.app)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(read_s2_item), app=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistrationRequest(Payload):
    """``A{topic S2}, app S2, sequence LONG``: ADD_CONSUMER and ADD_PRODUCER."""

    topics: tuple[str, ...] = ()
    app: str = ""
    sequence: int = 0

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.topics, write_s2_item)
        w.write_s2(self.app)
        w.write_long(self.sequence)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(topics=r.read_array(read_s2_item), app=r.read_s2(), sequence=r.read_long())


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisteredTopic:
    """A topic and the opaque consumer/producer id the broker assigned."""

    topic: str = ""
    id: str = ""


def _write_registered(w: Writer, entry: RegisteredTopic) -> None:
    w.write_s2(entry.topic)
    w.write_s2(entry.id)


def _read_registered(r: Reader) -> RegisteredTopic:
    return RegisteredTopic(topic=r.read_s2(), id=r.read_s2())


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistrationResponse(Payload):
    """``A{topic S2, id S2}``: the ADD_CONSUMER (−3) and ADD_PRODUCER (−5) responses."""

    entries: tuple[RegisteredTopic, ...] = ()

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_array(self.entries, _write_registered)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(entries=r.read_array(_read_registered))
