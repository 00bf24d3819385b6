"""The request URI of zbus.md §2: path and URL parameters.

Hand-written rather than ``httptools.parse_url``: the spec splits at the first ``?`` only (a
``#`` belongs to the query, so ``body=a#b`` keeps its ``#b``), skips empty ``&&`` segments,
decodes ``+`` as space, and must accept whatever bytes the 2015 clients put in a URI, where
``parse_url`` rejects or re-interprets several of them.
"""

from __future__ import annotations

from urllib.parse import unquote, unquote_plus


def split_uri(uri: str) -> tuple[str, dict[str, str]]:
    """Split ``uri`` into its decoded path and its URL parameters.

    Path: one leading ``/`` removed, then percent-decoded. Parameters: split on ``&`` (empty
    segments skipped), each at its first ``=`` (no ``=`` → value ``""``), key and value
    percent-decoded as UTF-8 with ``+`` as space, key trimmed and lower-cased, a repeated key's
    last value winning. Segments whose key is empty after trimming are skipped.
    """
    path, _, query = uri.partition("?")
    if path.startswith("/"):
        path = path[1:]
    params: dict[str, str] = {}
    for segment in query.split("&"):
        if not segment:
            continue
        raw_key, _, raw_value = segment.partition("=")
        key = unquote_plus(raw_key, errors="replace").strip(" \t").lower()
        if key:
            params[key] = unquote_plus(raw_value, errors="replace")
    return unquote(path, errors="replace"), params
