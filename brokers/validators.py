"""Validators shared by the catalog models: names that travel on every wire protocol."""

from __future__ import annotations

import ipaddress

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

from brokers.protocols.zbus import is_valid_mq_name
from brokers.topic_codes import TOPIC_CODE_PATTERN, is_topic_code

# Topic, app and policy names appear in JMQ4 S2 strings, zbus MQ names, VibeMQ queue
# names, HTTP parameters and Redis keys: a conservative character set keeps all happy.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

name_validator = RegexValidator(
    NAME_PATTERN,
    "Use letters, digits, '.', '_' or '-', starting with a letter or digit.",
)

# JMQ4 writes app codes as S1 strings (at most 127 bytes).
APP_CODE_MAX = 100


def validate_topic_code(value: str) -> None:
    """The whole rule of :func:`brokers.topic_codes.is_topic_code`: besides the characters
    (which the regex validator also states, for the OpenAPI schema), no ``.`` or ``..``
    (path segments that mean something else) and no trailing newline (which ``$`` lets
    through)."""
    if not is_topic_code(value):
        raise ValidationError(f"{value!r} is not a topic code.")


# Topic codes are also VibeMQ queue names (vibemq.md §13): they may start with '.', '_' or
# '-' and have up to 256 characters (brokers.topic_codes, which servers check with).
topic_code_validators = [
    RegexValidator(TOPIC_CODE_PATTERN, "Use letters, digits, '.', '_' or '-'."),
    validate_topic_code,
]


def validate_zbus_name(value: str) -> None:
    """A topic's zbus MQ name besides its code: a valid zbus name (zbus.md §7: 1–255 bytes
    of UTF-8 without whitespace, control characters, ``/ ? & = %``) that is not itself a
    topic code — a zbus client that names a code gets the topic of that code."""
    if not is_valid_mq_name(value):
        raise ValidationError(
            "Not a zbus MQ name: 1–255 bytes of UTF-8 without whitespace, control"
            " characters, '/', '?', '&', '=' or '%'."
        )
    if is_topic_code(value):
        raise ValidationError(
            f"{value!r} is a topic code: zbus clients reach the topic of that code by it."
            " A zbus name is only for names a code cannot be."
        )


def validate_ip_list(value: object) -> None:
    """A blacklist is a JSON list of IPv4/IPv6 addresses or networks (CIDR)."""
    if not isinstance(value, list):
        raise ValidationError("Must be a list of IP addresses or networks.")
    if len(value) > 1000:
        raise ValidationError("At most 1000 entries.")
    for item in value:
        if not isinstance(item, str):
            raise ValidationError(f"{item!r} is not a string.")
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValidationError(f"{item!r} is not an IP address or network.") from None


def validate_broker_weights(value: object) -> None:
    """Producer weights map broker ids (as strings) to weights 0–10000."""
    if not isinstance(value, dict):
        raise ValidationError("Must be an object mapping broker ids to weights.")
    for key, weight in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit()):
            raise ValidationError(f"Broker id {key!r} must be a positive integer.")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 10000:
            raise ValidationError(f"Weight of broker {key} must be an integer from 0 to 10000.")
