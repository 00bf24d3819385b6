"""The base class shared by every typed JMQ4 payload.

A payload knows its command type (``TYPE``) and how to write and read itself for a given
request header version (spec §2.1: only FETCH_CLUSTER and FETCH_INDEX responses vary).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Self

from brokers.protocols.jmq4.codes import CommandType
from brokers.protocols.jmq4.primitives import Reader, Writer


class Payload(ABC):
    """A typed frame body. Subclasses are frozen dataclasses."""

    __slots__ = ()
    TYPE: ClassVar[CommandType]

    @abstractmethod
    def write(self, w: Writer, version: int) -> None:
        """Append the payload fields for header ``version``."""

    @classmethod
    @abstractmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Read the payload fields for header ``version``."""


class EmptyPayload(Payload):
    """A payload with no fields (HEARTBEAT, REMOVE_CONNECTION, FETCH_HEALTH, BooleanAck)."""

    __slots__ = ()

    def write(self, w: Writer, version: int) -> None:
        """Nothing to write."""

    @classmethod
    def read(cls, r: Reader, version: int) -> Self:
        """Nothing to read."""
        return cls()
