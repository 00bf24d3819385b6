"""Secrets in applications and the audit trail: stored sealed, never shown.

A topic's zbus access token (``zbus_token``) is a secret: the topic keeps only its hash.
An application carries its payload until it is approved, and the audit trail keeps what
was asked and done — so the token sat in both in clear text, shown to the whole team by
the console and the API. Now a payload is sealed before it is stored (:func:`seal`: the
token is replaced by its hash, ``zbus_token_hash``, which is all that approving it needs
to set on the topic), and every payload or audit detail shown or recorded is redacted
(:func:`redacted`: the token, clear or sealed, shows as set or cleared, never its value
or hash — a hash of a token someone chose can be guessed back).
"""

from __future__ import annotations

import re
from typing import Any

from brokers.engine import hash_token

TOKEN = "zbus_token"
SEALED = "zbus_token_hash"
SHOWN_SET = "(set)"
SHOWN_CLEARED = "(cleared)"
_HASH = re.compile(r"[0-9a-f]{64}")


def _seal_one(fields: dict[str, Any]) -> dict[str, Any]:
    if TOKEN not in fields:
        return fields
    out = {k: v for k, v in fields.items() if k != TOKEN}
    token = fields[TOKEN]
    out[SEALED] = hash_token(token) if isinstance(token, str) and token else ""
    return out


def seal(payload: Any) -> Any:
    """``payload`` with its zbus token (top level or under ``changes``) replaced by the
    token's hash: what an application stores."""
    if not isinstance(payload, dict):
        return payload
    out = _seal_one(payload)
    if isinstance(out.get("changes"), dict):
        out = {**out, "changes": _seal_one(out["changes"])}
    return out


def unseal(fields: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``fields`` without a sealed token, and that token's stored form (its hash, or ""
    to clear it; None when the fields set none). ValueError for anything :func:`seal`
    does not write."""
    if SEALED not in fields:
        return fields, None
    sealed = fields[SEALED]
    if not isinstance(sealed, str) or not (sealed == "" or _HASH.fullmatch(sealed)):
        raise ValueError(f"{SEALED} is written by the console: give {TOKEN}")
    return {k: v for k, v in fields.items() if k != SEALED}, sealed


def redacted(value: Any) -> Any:
    """``value`` (a payload or audit detail, at any depth) with every zbus token, clear
    or sealed, shown only as set or cleared."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in (TOKEN, SEALED):
                out[TOKEN] = SHOWN_SET if item else SHOWN_CLEARED
            else:
                out[key] = redacted(item)
        return out
    if isinstance(value, list):
        return [redacted(item) for item in value]
    return value
