"""Free text and return paths that users send the console's forms and API, checked the
same way wherever they arrive: a message (feedback, an answer, an announcement) and a path
back to a console page (``next``, the page a feedback came from)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.utils.http import url_has_allowed_host_and_scheme


def clean_message(raw: object, limit: int, what: str) -> str:
    """A non-empty string of at most ``limit`` characters without NUL, stripped;
    ValidationError naming ``what`` otherwise."""
    if not isinstance(raw, str):
        raise ValidationError(f"The {what} must be text.")
    text = raw.strip()
    if not text:
        raise ValidationError(f"Write the {what}.")
    if len(text) > limit:
        raise ValidationError(f"The {what} is at most {limit} characters (it has {len(text)}).")
    if "\x00" in text:
        raise ValidationError(f"The {what} cannot contain NUL characters.")
    return text


def console_path(raw: object) -> str:
    """``raw`` if it is a path on this console (never another site), else ''."""
    if not isinstance(raw, str) or not raw.startswith("/") or "\x00" in raw:
        return ""
    return raw if url_has_allowed_host_and_scheme(raw, allowed_hosts=None) else ""
