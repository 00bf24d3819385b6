"""Connection-level commands (spec §5.1): ADD_CONNECTION, REMOVE_CONNECTION, HEARTBEAT,
FETCH_HEALTH, and the BooleanAck response (§2.2)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

from brokers.protocols.jmq4.codes import CommandType
from brokers.protocols.jmq4.errors import DecodeError
from brokers.protocols.jmq4.payload import EmptyPayload, Payload
from brokers.protocols.jmq4.primitives import Reader, Writer


class Language(IntEnum):
    """Client language in ADD_CONNECTION; any other value is a decode error."""

    JAVA = 0
    C = 1
    CPP = 2
    PYTHON = 3
    RUBY = 4
    DOTNET = 5
    ERLANG = 6
    GO = 7
    OTHER = 8


_LANGUAGES = {member.value: member for member in Language}


@dataclass(frozen=True, slots=True, kw_only=True)
class AddConnectionRequest(Payload):
    """ADD_CONNECTION (1). Every string is S1."""

    TYPE = CommandType.ADD_CONNECTION

    username: str = ""
    password: str = ""
    app: str = ""
    token: str = ""
    region: str = ""
    namespace: str = ""
    language: Language = Language.JAVA
    version: str = ""
    ip: str = ""
    time: int = 0
    sequence: int = 0

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        for text in (
            self.username,
            self.password,
            self.app,
            self.token,
            self.region,
            self.namespace,
        ):
            w.write_s1(text)
        w.write_byte(self.language)
        w.write_s1(self.version)
        w.write_s1(self.ip)
        w.write_long(self.time)
        w.write_long(self.sequence)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields; an unknown language is a :class:`DecodeError`."""
        username, password, app, token, region, namespace = (r.read_s1() for _ in range(6))
        raw_language = r.read_byte()
        language = _LANGUAGES.get(raw_language)
        if language is None:
            raise DecodeError(f"unknown language {raw_language}")
        return cls(
            username=username,
            password=password,
            app=app,
            token=token,
            region=region,
            namespace=namespace,
            language=language,
            version=r.read_s1(),
            ip=r.read_s1(),
            time=r.read_long(),
            sequence=r.read_long(),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AddConnectionResponse(Payload):
    """ADD_CONNECTION response (−1)."""

    TYPE = CommandType.ADD_CONNECTION_RESPONSE

    connection_id: str = ""
    notification: str = ""

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_s1(self.connection_id)
        w.write_s2(self.notification)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(connection_id=r.read_s1(), notification=r.read_s2())


@dataclass(frozen=True, slots=True)
class RemoveConnectionRequest(EmptyPayload):
    """REMOVE_CONNECTION (2); answered with a BooleanAck."""

    TYPE = CommandType.REMOVE_CONNECTION


@dataclass(frozen=True, slots=True)
class HeartbeatRequest(EmptyPayload):
    """HEARTBEAT (7); answered with a BooleanAck."""

    TYPE = CommandType.HEARTBEAT


@dataclass(frozen=True, slots=True)
class FetchHealthRequest(EmptyPayload):
    """FETCH_HEALTH (8)."""

    TYPE = CommandType.FETCH_HEALTH


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchHealthResponse(Payload):
    """FETCH_HEALTH response (−8); the broker always answers 0.0."""

    TYPE = CommandType.FETCH_HEALTH_RESPONSE

    point: float = 0.0

    def write(self, w: Writer, version: int) -> None:
        """Append the fields."""
        w.write_double(self.point)

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the fields."""
        return cls(point=r.read_double())


@dataclass(frozen=True, slots=True)
class BooleanAck(EmptyPayload):
    """BOOLEAN_ACK (−128): no payload; the outcome is the header status and error."""

    TYPE = CommandType.BOOLEAN_ACK
