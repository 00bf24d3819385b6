"""Header spellings (zbus.md §3): folding aliases into canonical names, and writing them back.

Inbound, every accepted spelling is renamed to its canonical name, the canonical spelling
winning over aliases (``msgid`` > ``id``; ``msgid_raw`` > ``msgid-raw`` > ``rawid``; …).
The aliases a peer used for ``msgid``, ``msgid_raw`` or ``mq_reply`` are remembered as an
:class:`AliasFamily` so replies and deliveries to that peer can repeat them (§3 "Output
spelling"). Families rather than single names: a peer that says ``id`` reads ``rawid`` too,
and one that says ``mq-reply`` reads ``msgid-raw`` (the older client API).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Flag

from brokers.protocols.zbus.constants import Header


class AliasFamily(Flag):
    """Which non-canonical spellings a peer uses; written in addition to the canonical ones."""

    NONE = 0
    ID = 1
    """``id`` / ``rawid`` (some non-5.x clients)."""
    HYPHEN = 2
    """``mq-reply`` / ``msgid-raw`` (seed 000 and the older client API)."""


PRECEDENCE: dict[str, tuple[str, ...]] = {
    Header.MSGID: ("msgid", "id"),
    Header.MSGID_RAW: ("msgid_raw", "msgid-raw", "rawid"),
    Header.MQ_REPLY: ("mq_reply", "mq-reply"),
    Header.SUB_CMD: ("sub_cmd", "method"),
    Header.REPLY_CODE: ("reply_code", "reply-code"),
}
"""Canonical name → every accepted spelling, highest precedence first."""

_CANONICAL_OF = {name: canonical for canonical, names in PRECEDENCE.items() for name in names}
_FAMILY_OF = {
    "id": AliasFamily.ID,
    "rawid": AliasFamily.ID,
    "mq-reply": AliasFamily.HYPHEN,
    "msgid-raw": AliasFamily.HYPHEN,
}
_FAMILY_BITS = {name: family.value for name, family in _FAMILY_OF.items()}
_FAMILIES = [AliasFamily(bits) for bits in range(2 * max(f.value for f in AliasFamily))]
"""Every family by its bits (all combinations of the flags)."""
_WRITTEN_ALIASES: dict[AliasFamily, dict[str, str]] = {
    AliasFamily.ID: {Header.MSGID: "id", Header.MSGID_RAW: "rawid"},
    AliasFamily.HYPHEN: {Header.MSGID_RAW: "msgid-raw", Header.MQ_REPLY: "mq-reply"},
}


_ALIAS_SPELLINGS = frozenset(name for name, canonical in _CANONICAL_OF.items() if name != canonical)


def canonicalize(headers: Mapping[str, str]) -> tuple[dict[str, str], AliasFamily]:
    """Rename aliases to canonical names (keeping positions) and report the families used.
    Headers with no alias spelling (what most clients send) come back as a copy at once."""
    if _ALIAS_SPELLINGS.isdisjoint(headers):
        return dict(headers), AliasFamily.NONE
    out: dict[str, str] = {}
    family = 0  # the flags as an int: Flag arithmetic costs a call per operation
    for key, value in headers.items():
        canonical = _CANONICAL_OF.get(key)
        if canonical is None:
            out[key] = value
            continue
        family |= _FAMILY_BITS.get(key, 0)
        if key == canonical:  # the canonical spelling always wins
            out[key] = value
        elif key == next(name for name in PRECEDENCE[canonical] if name in headers):
            out[canonical] = value
    return out, _FAMILIES[family]


def aliases_for(name: str, family: AliasFamily) -> list[str]:
    """The alias spellings to write after canonical header ``name`` for a peer of ``family``."""
    return [
        written[name]
        for member, written in _WRITTEN_ALIASES.items()
        if member in family and name in written
    ]
