"""The ids a client sees for a stored message, and how a trace recognises them.

* **businessId** (JMQ4, HTTP-MQ): the record's businessId, or a batch item's.
* **Position**: a JMQ4 produce reply or fetch names a message by ``(partition, index)``,
  written ``partition:index`` (``2:17``); HTTP-MQ's ``msgId`` and ``offsetMsgId`` (32 hex
  digits, :mod:`proxy.httpmq.messages`) encode the same position — but for a delayed or
  timer message, whose ``msgId`` names the delay id it was held under, kept by the
  released record as the property :data:`~brokers.engine.DELAY_ID`.
* **Id properties**: VibeMQ's message ``id`` (stored as the ``messageId`` property) and
  zbus's ``msgid`` (every zbus header is a property of the record) — any property whose
  key is one of :data:`ID_PROPERTIES`, compared without case.

Only the live message browser (console) and the trace job (Spark) use this; neither
needs a protocol server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from brokers.engine import DELAY_ID
from proxy.httpmq.messages import DELAYED, parse_message_id

ID_PROPERTIES = ("vibemq.id", "msgid", "id", "messageid", "message_id")
POSITION = re.compile(r"(\d{1,5}):(\d{1,19})")
HEX32 = re.compile(r"[0-9a-fA-F]{32}")


@dataclass(frozen=True)
class MessageId:
    """What a client gave: the text, and the positions it may name."""

    text: str
    positions: tuple[tuple[int, int], ...] = ()
    delay_id: int | None = None
    """The delay id a delayed message's ``msgId`` names (it has no position in its id)."""

    @property
    def partitions(self) -> set[int] | None:
        """The partitions the message can be in (None: any)."""
        return None if not self.positions else {p for p, _i in self.positions}


def parse(topic: str, text: str) -> MessageId:
    """The id ``text`` of a message of ``topic`` (ValueError when empty)."""
    text = text.strip()
    if not text:
        raise ValueError("a message id or businessId is required")
    positions: list[tuple[int, int]] = []
    if m := POSITION.fullmatch(text):
        positions.append((int(m[1]), int(m[2])))
    elif HEX32.fullmatch(text):
        try:
            partition, index = parse_message_id(topic, text.lower())  # msgId
        except ValueError:
            positions.append((int(text[:8], 16), int(text[8:24], 16)))  # offsetMsgId
        else:
            if partition == DELAYED:
                return MessageId(text, (), delay_id=index)
            positions.append((partition, index))
    return MessageId(text, tuple(positions))


def id_properties(attributes: Mapping[str, str]) -> list[str]:
    """The values of ``attributes`` that are ids."""
    return [v for k, v in attributes.items() if k.lower() in ID_PROPERTIES]


def matches(
    mid: MessageId,
    partition: int,
    indexes: Iterable[int],
    business_ids: Iterable[str],
    attributes: Mapping[str, str],
) -> bool:
    """Whether a stored record (its indexes, businessIds and properties) is ``mid``."""
    if any((partition, i) in mid.positions for i in indexes):
        return True
    if mid.delay_id is not None and attributes.get(DELAY_ID) == str(mid.delay_id):
        return True
    return mid.text in business_ids or mid.text in id_properties(attributes)
