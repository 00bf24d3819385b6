"""Tests of the sans-IO JMQ4 codec (brokers.protocols.jmq4)."""
