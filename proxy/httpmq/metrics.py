"""Prometheus metrics of the HTTP-MQ service: requests, latency, errors, connections.

``mqcloud_httpmq_requests_total{endpoint,status}``, the latency histogram
``mqcloud_httpmq_request_seconds{endpoint}``, ``mqcloud_httpmq_errors_total{endpoint,error}``
(the envelope's error code) and the gauge ``mqcloud_httpmq_connections``. ``endpoint`` is
the route (``produce``, ``message`` …, ``other`` for unknown paths) so the label set stays
small whatever clients send.

With several serving processes on one port, a scrape reaches any one of them; so
``runproxy`` gives them one ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess
mode: each process writes its values to files there) and :func:`exposition` adds up every
process's figures.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class Metrics:
    """The service's metrics in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "mqcloud_httpmq_requests",
            "HTTP-MQ requests answered, by endpoint and HTTP status.",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "mqcloud_httpmq_request_seconds",
            "Time from a request's headers to its last response byte, by endpoint.",
            ["endpoint"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "mqcloud_httpmq_errors",
            "HTTP-MQ error envelopes, by endpoint and error code.",
            ["endpoint", "error"],
            registry=self.registry,
        )
        self.connections = Gauge(
            "mqcloud_httpmq_connections",
            "Open client connections.",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self._children: dict[tuple[str, int], tuple[object, object]] = {}

    def observe(self, endpoint: str, status: int, error: str | None, seconds: float) -> None:
        """Count one answered request."""
        key = (endpoint, status)
        children = self._children.get(key)
        if children is None:  # label lookups cost more than the increments: cache them
            children = (
                self.requests.labels(endpoint, str(status)),
                self.latency.labels(endpoint),
            )
            self._children[key] = children
        children[0].inc()  # type: ignore[attr-defined]
        children[1].observe(seconds)  # type: ignore[attr-defined]
        if error:
            self.errors.labels(endpoint, error).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The text format of every serving process's figures, and its content type."""
        if os.environ.get(MULTIPROC_ENV):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
