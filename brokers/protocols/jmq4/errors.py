"""Exceptions raised by the JMQ4 codec.

Both derive from ``ValueError`` so callers that only care about "bad input" can catch that.
"""


class DecodeError(ValueError):
    """Bytes that do not form a valid JMQ4 structure (overrun, negative length, bad UTF-8, …)."""


class EncodeError(ValueError):
    """A value that cannot be written in JMQ4 (string too long, integer out of range, …)."""
