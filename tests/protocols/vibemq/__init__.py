"""Tests of the VibeMQ JSON codec (brokers.protocols.vibemq)."""
