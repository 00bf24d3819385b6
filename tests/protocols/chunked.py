"""Feeding a stream decoder in pieces, for the decoders' chunking properties."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def feed_in_chunks(
    decoder: Any, data: bytes, chunks: list[int], error: Callable[[Any], object | None]
) -> list[object]:
    """Every event of ``data`` fed to ``decoder`` in ``chunks`` (the rest at the end,
    nothing once it closed), then what its ``eof`` reports; an event ``error`` describes
    (errors never compare equal) stands as that description."""
    out: list[object] = []
    pos = 0
    for size in [*chunks, len(data)]:
        if decoder.closed:
            break
        out += decoder.feed(data[pos : pos + size])
        pos += size
    out.append(decoder.eof())
    described = [error(e) for e in out]
    return [e if d is None else d for e, d in zip(out, described, strict=True)]
