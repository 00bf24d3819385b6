"""The zbus 5.x broker server on the message engine (zbus.md), with its browser admin page.

:func:`start_zbus_server` listens on the zbus port; each connection decodes messages with
the sans-IO codec of :mod:`brokers.protocols.zbus` and runs them against the engine:
queue MQs (:mod:`.queue`), pub/sub MQs (:mod:`.pubsub`), Temp reply queues (:mod:`.temp`),
RPC (:mod:`.request`) and admin (:mod:`.admin`, :mod:`.index`, :mod:`.track`).
"""

from brokers.servers.zbus.config import ZbusConfig
from brokers.servers.zbus.server import ZbusServer, start_zbus_server

__all__ = ["ZbusConfig", "ZbusServer", "start_zbus_server"]
