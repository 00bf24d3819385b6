"""Everything a stored message carries, as one properties map, and which protocol produced
it — for the message browser and the API.

The engine stores one properties map per message (JMQ4 attributes, zbus headers, VibeMQ
headers with the message id as ``messageId``, HTTP-MQ's ``KEYS``); names starting with
``:`` are pseudo-properties that front-ends keep for themselves (zbus's ``:status``,
VibeMQ's ``:content-type``). The producing protocol is the record's extension mark: zbus
``zb1\\0`` (:data:`brokers.servers.zbus.stored.MARK`), VibeMQ ``vm1\\0``
(:data:`brokers.servers.vibemq.messages.MARK`), HTTP-MQ ``hm1\\0``
(:data:`proxy.httpmq.messages.HTTPMQ_EXTENSION`); anything else came over JMQ4 (or straight
through the engine's Python API).
"""

from __future__ import annotations

from brokers.engine import StoredMessage, client_name
from brokers.servers.vibemq.messages import MARK as VIBEMQ_MARK
from brokers.servers.zbus.stored import MARK as ZBUS_MARK
from brokers.servers.zbus.stored import STATUS as ZBUS_STATUS
from proxy.httpmq.messages import HTTPMQ_EXTENSION

JMQ4, ZBUS, VIBEMQ, HTTPMQ = "JMQ4", "zbus", "VibeMQ", "HTTP-MQ"
PROTOCOLS = (JMQ4, ZBUS, VIBEMQ, HTTPMQ)
MARKS = {ZBUS_MARK: ZBUS, VIBEMQ_MARK: VIBEMQ, HTTPMQ_EXTENSION: HTTPMQ}


def producing_protocol(message: StoredMessage) -> str:
    """Which front-end stored ``message``: one of PROTOCOLS."""
    return MARKS.get(bytes(message.extension[:4]), JMQ4)


def message_properties(message: StoredMessage) -> dict[str, str]:
    """Every property the message carries, by name; a zbus reply's status as ``status``,
    other pseudo-properties left out."""
    properties = {}
    for key, value in message.attributes.items():
        key, value = str(key), str(value)
        name = client_name(key)
        if key == ZBUS_STATUS:
            properties["status"] = value
        elif name is not None:
            properties[name] = value
    return dict(sorted(properties.items()))
