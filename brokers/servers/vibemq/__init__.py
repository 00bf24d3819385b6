"""The VibeMQ server (vibemq.md): one transport-independent :class:`Session` per connection,
fed by the TCP protocol here or by the WebSocket consumer of the web process."""

from brokers.servers.vibemq.commands import COMMANDS
from brokers.servers.vibemq.config import ServerConfig, config_from
from brokers.servers.vibemq.context import ServerContext
from brokers.servers.vibemq.hub import Hub
from brokers.servers.vibemq.server import VibeMQServer, start_vibemq_server
from brokers.servers.vibemq.session import Session, Transport, client_address

__all__ = [
    "COMMANDS",
    "Hub",
    "ServerConfig",
    "ServerContext",
    "Session",
    "Transport",
    "VibeMQServer",
    "client_address",
    "config_from",
    "start_vibemq_server",
]
