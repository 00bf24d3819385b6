"""Tests of the zbus 5.x codec (brokers.protocols.zbus)."""
