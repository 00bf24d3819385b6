"""Everything a stored message carries, as one generic properties map, and which protocol
produced it — for the message browser and the API.

Today's stored record (``brokers.engine.StoredMessage``) keeps a message's metadata in two
places, and this module is the one place that knows them:

* ``attributes`` — JMQ4 properties, VibeMQ headers (with the message id under
  ``vibemq.id``) and HTTP-MQ's ``KEYS``;
* ``extension`` — zbus keeps its headers and status there (``zb1\\0`` + msgpack, decoded by
  the zbus server's own mapping, :func:`brokers.servers.zbus.stored.from_stored`); HTTP-MQ
  marks its records with ``hm1\\0`` (:data:`proxy.httpmq.messages.HTTPMQ_EXTENSION`).

The producing protocol is read from those marks: zbus by its extension, HTTP-MQ by its
mark, VibeMQ by its ``vibemq.id`` attribute, anything else came over JMQ4 (or straight
through the engine's Python API). When the engine stores one properties map per message
(issue #17), :func:`message_properties` and :func:`producing_protocol` are what changes;
the templates and the API only see the dict and the name.
"""

from __future__ import annotations

from brokers.engine import StoredMessage
from brokers.servers.vibemq.messages import ID_ATTRIBUTE as VIBEMQ_ID
from brokers.servers.zbus.stored import MAGIC as ZBUS_MAGIC
from brokers.servers.zbus.stored import from_stored as zbus_message
from proxy.httpmq.messages import HTTPMQ_EXTENSION

JMQ4, ZBUS, VIBEMQ, HTTPMQ = "JMQ4", "zbus", "VibeMQ", "HTTP-MQ"
PROTOCOLS = (JMQ4, ZBUS, VIBEMQ, HTTPMQ)


def producing_protocol(message: StoredMessage) -> str:
    """Which front-end stored ``message``: one of PROTOCOLS."""
    if message.extension.startswith(ZBUS_MAGIC):
        return ZBUS
    if message.extension.startswith(HTTPMQ_EXTENSION):
        return HTTPMQ
    if VIBEMQ_ID in message.attributes:
        return VIBEMQ
    return JMQ4


def message_properties(message: StoredMessage) -> dict[str, str]:
    """Every property the message carries, by name (zbus headers included, and its
    status line's code as ``status`` when it is a reply)."""
    properties = {str(k): str(v) for k, v in message.attributes.items()}
    if message.extension.startswith(ZBUS_MAGIC):
        zbus = zbus_message(message)
        properties.update({str(k): str(v) for k, v in zbus.headers.items()})
        status = getattr(zbus.start, "status", 0)
        if status:
            properties["status"] = str(status)
    return dict(sorted(properties.items()))
