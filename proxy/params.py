"""Reading HTTP-MQ parameters: query string and url-encoded form, validated."""

from __future__ import annotations

from django.http import HttpRequest

from proxy.envelope import bad_parameter

MAX_PARAM = 64


def collect(request: HttpRequest) -> dict[str, str]:
    """Query parameters merged with form fields (the form wins); one value per name."""
    params = {k: request.GET.get(k, "") for k in request.GET}
    if request.method == "POST":
        params.update({k: request.POST.get(k, "") for k in request.POST})
    if len(params) > MAX_PARAM:
        raise bad_parameter(f"too many parameters (at most {MAX_PARAM})")
    return params


def required(params: dict[str, str], name: str) -> str:
    value = params.get(name, "")
    if not value:
        raise bad_parameter(f"{name} is required")
    return value


def integer(params: dict[str, str], name: str, low: int, high: int) -> int | None:
    """An optional integer parameter within [low, high]."""
    raw = params.get(name, "")
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise bad_parameter(f"{name} must be an integer") from None
    if not low <= value <= high:
        raise bad_parameter(f"{name} must be between {low} and {high}")
    return value


def boolean(params: dict[str, str], name: str) -> bool:
    raw = params.get(name, "").lower()
    if raw in ("", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise bad_parameter(f"{name} must be true or false")
