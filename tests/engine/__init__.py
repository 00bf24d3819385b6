"""Tests of the message engine (brokers.engine) on real Redis and Redis Cluster."""
