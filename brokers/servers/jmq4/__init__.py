"""The JMQ4 broker server: asyncio front-end binding the JMQ4 codec to the engine.

Layers, thinnest first:

* :mod:`.protocol` — asyncio protocol: bytes ↔ :class:`FrameDecoder` ↔ dispatch, with
  bounded concurrency and read backpressure;
* :mod:`.dispatch` — command type → handler, failures → BooleanAck;
* :mod:`.session` — per-connection state and the §6.1 authorization rules;
* :mod:`.connection`, :mod:`.cluster`, :mod:`.assignment`, :mod:`.produce`,
  :mod:`.consume`, :mod:`.transaction` — one module per command group, mapping payloads
  to engine calls;
* :mod:`.coordinator` — coordinator choice (the engine shares out the partition groups);
* :mod:`.server` — :func:`start_jmq4_server` and graceful stop.
"""

from brokers.servers.jmq4.context import ServerConfig
from brokers.servers.jmq4.server import Jmq4Server, install_uvloop, start_jmq4_server

__all__ = ["Jmq4Server", "ServerConfig", "install_uvloop", "start_jmq4_server"]
