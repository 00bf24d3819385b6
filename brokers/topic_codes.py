"""The catalog's rule for topic codes, Django-free: a server checks a queue or MQ name a
client asks for before it asks the catalog, and the models validate with the same rule.

A code travels in Redis keys, URLs and every protocol: ``[A-Za-z0-9._-]``, 1 to 256
characters (VibeMQ's queue names, vibemq.md §13), but never ``.`` or ``..`` (a URL path
segment that means something else).

A zbus MQ name may hold what a code may not (``:``, ``{``, any UTF-8 letter, zbus.md §7):
such an MQ is a topic whose code is derived from its name (:func:`code_for_name`) and
whose ``zbus_name`` is the name.
"""

from __future__ import annotations

import hashlib
import re

from brokers.engine import DLQ_SUFFIX

TOPIC_CODE_MAX = 256
TOPIC_CODE_CHARS = r"[A-Za-z0-9._-]+"
"""The characters, as a URL route matches them."""
TOPIC_CODE_PATTERN = f"^{TOPIC_CODE_CHARS}$"
"""The same as a JSON-Schema-friendly regex (:func:`is_topic_code` is the whole rule)."""
DOT_SEGMENTS = frozenset({".", ".."})
STORED_TOPIC_MAX = TOPIC_CODE_MAX + len(DLQ_SUFFIX)
"""The longest topic name a stored message can carry: a code, or its implicit DLQ's."""

_CODE = re.compile(TOPIC_CODE_CHARS)


def is_topic_code(name: str) -> bool:
    """Whether ``name`` may be a topic's code."""
    return (
        len(name) <= TOPIC_CODE_MAX
        and _CODE.fullmatch(name) is not None
        and name not in DOT_SEGMENTS
    )


_NOT_CODE = re.compile(r"[^A-Za-z0-9._-]+")
_READABLE_MAX = 200


def code_for_name(name: str) -> str:
    """The topic code of an MQ called ``name``: the name itself when it is a code, else
    its code characters (runs of others as one ``_``, at most 200) then ``-`` and 12 hex
    digits of its SHA-256 — ``order:created`` → ``order_created-…``, ``订单`` →
    ``mq-…``. The same on every broker, so two that create the MQ at once agree."""
    if is_topic_code(name):
        return name
    readable = _NOT_CODE.sub("_", name)[:_READABLE_MAX].strip("._-") or "mq"
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}-{digest}"
