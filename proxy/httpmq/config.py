"""Settings of the HTTP-MQ service, read from the environment (README "Configuration").

A frozen value handed to each serving process; nothing here imports Django, so the
service runs the same under ``manage.py runproxy`` and in a benchmark.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


def _bool(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Where the service listens, what it talks to, and its limits."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    host: str = "127.0.0.1"
    port: int = 8081
    processes: int = 0  # 0: one per core
    console_url: str = "http://127.0.0.1:8000"  # the web process (console-token endpoints)
    trusted_proxies: frozenset[str] = frozenset()
    max_body_bytes: int = 64 * 1024 * 1024
    max_header_bytes: int = 64 * 1024
    header_timeout: float = 10.0  # seconds to send a request's line and headers
    body_timeout: float = 30.0  # seconds to send a request's body
    keepalive_timeout: float = 15.0  # an idle keep-alive connection is closed after this
    max_connections: int = 10_000  # per process; past it the longest-idle one is closed
    access_log: bool = False
    redis_connections: int = 64
    report_seconds: float = 5.0  # each process's report is renewed this often

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> ProxyConfig:
        """The settings of ``env`` (default: the process environment); keyword arguments
        win (``runproxy``'s options)."""
        env = os.environ if env is None else env
        get = env.get
        d = cls()  # the defaults
        values: dict[str, object] = {
            "redis_url": get("REDIS_URL", d.redis_url),
            "host": get("HTTPMQ_BIND_HOST", d.host),
            "port": int(get("HTTPMQ_PORT", d.port)),
            "processes": int(get("HTTPMQ_PROCESSES", d.processes)),
            "console_url": get(
                "HTTPMQ_CONSOLE_URL", f"http://127.0.0.1:{get('WEB_PORT', '8000')}"
            ).rstrip("/"),
            "trusted_proxies": frozenset(
                p.strip() for p in get("HTTPMQ_TRUSTED_PROXIES", "").split(",") if p.strip()
            ),
            "max_body_bytes": int(get("HTTPMQ_MAX_BODY_BYTES", d.max_body_bytes)),
            "max_header_bytes": int(get("HTTPMQ_MAX_HEADER_BYTES", d.max_header_bytes)),
            "header_timeout": float(get("HTTPMQ_HEADER_TIMEOUT_SECONDS", d.header_timeout)),
            "body_timeout": float(get("HTTPMQ_BODY_TIMEOUT_SECONDS", d.body_timeout)),
            "keepalive_timeout": float(
                get("HTTPMQ_KEEPALIVE_TIMEOUT_SECONDS", d.keepalive_timeout)
            ),
            "max_connections": int(get("HTTPMQ_MAX_CONNECTIONS", d.max_connections)),
            "access_log": _bool(get("HTTPMQ_ACCESS_LOG", "false")),
            "redis_connections": int(get("HTTPMQ_REDIS_CONNECTIONS", d.redis_connections)),
            "report_seconds": float(get("HTTPMQ_REPORT_SECONDS", d.report_seconds)),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    def process_count(self) -> int:
        """How many serving processes: ``processes``, or one per core."""
        return self.processes if self.processes > 0 else (os.cpu_count() or 1)
