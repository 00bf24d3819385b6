"""Python client for the zbus 5.x protocol (asyncio)."""

from brokers.clients.zbus.client import ZbusClient, ZbusError

__all__ = ["ZbusClient", "ZbusError"]
