"""Make the OpenAPI schema say what the API does, for every operation at once.

drf-spectacular documents the success answer of each operation; :func:`declare_errors`
adds the error answers the API's own machinery gives everywhere, each with the
``ApiError`` body: 401 for every operation (every endpoint needs a token or a session),
403 for every change (roles, read-only tokens), 404 wherever a path names an object,
400 wherever a query parameter or a body can be invalid, 409 for deletes that dependents
block and for creates and updates of catalog objects whose unique values (name, code, id,
host and ports) another object may hold, 415 wherever a body is read (request bodies are
JSON only), 503 where the answer comes from the message store (and for the deletes of a topic
or a consumer policy, which erase their data there). It also states on every
string a request can carry that it never contains NUL (PostgreSQL cannot store it; such
requests get 400).
"""

from __future__ import annotations

import re
from typing import Any

from mqcloud.api.errors import ERROR_DESCRIPTIONS

NO_NUL = "^[^\\u0000]*$"
ENGINE_PATHS = ("/api/v1/consumers/", "/messages/", "/traffic/", "/delayed/")
ERASING_DELETES = ("/api/v1/topics/{code}/", "/api/v1/consumer-policies/{id}/")
ERROR_REF = {"$ref": "#/components/schemas/ApiError"}
# Catalog objects with unique values: their create (collection) and update (detail) paths.
UNIQUE_WRITES = re.compile(
    r"^/api/v1/(clusters|brokers|topics|apps|producer-policies|consumer-policies)/(\{\w+\}/)?$"
)


def _errors_of(path: str, method: str, operation: dict) -> list[int]:
    codes = [401]
    if method != "get":
        codes.append(403)
    if "{" in path:
        codes.append(404)
    params = [p for p in operation.get("parameters", []) if p.get("in") == "query"]
    if params or "requestBody" in operation or "{" in path:
        codes.append(400)
    if method == "delete" or (method in {"post", "put", "patch"} and UNIQUE_WRITES.match(path)):
        codes.append(409)
    if "requestBody" in operation:
        codes.append(415)
    if any(part in path for part in ENGINE_PATHS) and method == "get":
        codes.append(503)
    if method == "delete" and path in ERASING_DELETES:
        codes.append(503)  # the deleted object's data is erased from the message store
    return codes


def _forbid_nul(schema: dict, components: dict, seen: set[str]) -> None:
    """Add the no-NUL pattern to every free string in ``schema`` (following $refs once)."""
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        if name not in seen and name in components:
            seen.add(name)
            _forbid_nul(components[name], components, seen)
        return
    if schema.get("type") == "string" and not ({"pattern", "enum", "format"} & schema.keys()):
        schema["pattern"] = NO_NUL
    for key in ("properties",):
        for child in schema.get(key, {}).values():
            _forbid_nul(child, components, seen)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _forbid_nul(schema[key], components, seen)
    for key in ("allOf", "oneOf", "anyOf"):
        for child in schema.get(key, []):
            _forbid_nul(child, components, seen)


def declare_errors(result: dict, generator: Any, request: Any, public: bool) -> dict:
    """drf-spectacular postprocessing hook: error answers and NUL-free strings."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    seen: set[str] = set()
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            for code in _errors_of(path, method, operation):
                responses.setdefault(
                    str(code),
                    {
                        "content": {"application/json": {"schema": ERROR_REF}},
                        "description": ERROR_DESCRIPTIONS[code],
                    },
                )
            for param in operation.get("parameters", []):
                if isinstance(param.get("schema"), dict):
                    _forbid_nul(param["schema"], components, seen)
            for media in operation.get("requestBody", {}).get("content", {}).values():
                if isinstance(media.get("schema"), dict):
                    _forbid_nul(media["schema"], components, seen)
    return result
