"""HTTP-MQ endpoints that need the console token (http-mq.md §5, §6, §13.1).

Consumer configuration, unregistration and progress are operator actions: the caller
authenticates with a REST API token of a console user who may manage the consumer (a
member of its app's team, or a platform admin), every change lands in the audit trail,
and configuration is the catalog's consumer policy itself, so a change made here or in
the console reaches every broker and HTTP-MQ process within a second.

They need the console's database, so they are served here, under ``/api/v1/httpmq/…``;
clients call them on the HTTP-MQ service (``/mq/config/…`` and so on), which relays them
unchanged (``proxy/httpmq/relay.py``). The answers are HTTP-MQ envelopes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied

from brokers.engine import EngineError, PartitionProgress
from brokers.models import ConsumerPolicy
from mqcloud.api.authentication import ApiTokenAuthentication
from mqcloud.api.scoping import is_platform_admin, user_teams
from mqcloud.approvals.services import record
from mqcloud.engine_access import engine_session
from proxy.httpmq.envelope import ProxyError, Reply, bad_parameter, envelope, ok
from proxy.httpmq.messages import DELAYED, broker_name, parse_message_id

DEFAULT_LIMIT_RATE = 1024
RANGES = {
    "maxPullSize": (1, 128),
    "consumeTimeoutInMillis": (10_000, 129_600_000),
    "pullTimeoutInMillis": (1_000, 60_000),
    "pause": (0, 1),
    "rateLimitEnabled": (0, 1),
    "limitRate": (1, 1_000_000),
    "resetOffsetTimestamp": (0, 2**53),
}
FIELDS = {*RANGES, "consumer", "clientId", "retryMsgId", "startPosition"}
SWITCHES = ("pause", "rateLimitEnabled")
"""0/1 fields, which ``GET /mq/config`` shows as booleans: true and false are taken too."""
READ_ONLY = ("topic", "messageModel", "httpEnabled")
"""Fields ``GET /mq/config`` shows that a POST cannot change: accepted when they are what
the consumer has (a client may post back what it read with one field changed), 400
otherwise. ``clientIds`` is the registry of clients seen, not configuration: ignored."""


def _operator(request: HttpRequest) -> AbstractBaseUser:
    try:
        found = ApiTokenAuthentication().authenticate(request)
    except AuthenticationFailed as exc:
        raise ProxyError(401, "UNAUTHENTICATED", str(exc.detail)) from None
    except PermissionDenied as exc:  # a read-only token on a change
        raise ProxyError(403, "FORBIDDEN", str(exc.detail)) from None
    if found is None:
        raise ProxyError(401, "UNAUTHENTICATED", "console token missing: Authorization: Bearer")
    return found[0]


def _managed_policy(user: AbstractBaseUser, name: str) -> ConsumerPolicy:
    policy = None
    if name.isprintable():  # no name holds a NUL (PostgreSQL refuses one: 500) or control bytes
        policy = (
            ConsumerPolicy.objects.select_related("app__team", "topic").filter(name=name).first()
        )
    if policy is None:
        raise ProxyError(404, "CONSUMER_NOT_FOUND", f"consumer {name} is not registered")
    if not is_platform_admin(user) and not user_teams(user).filter(pk=policy.app.team_id).exists():
        raise ProxyError(403, "FORBIDDEN", f"you may not manage consumer {name}")
    return policy


def _response(reply: Reply) -> HttpResponse:
    response = HttpResponse(reply.body, status=reply.status)
    for name, value in reply.headers:
        response[name.decode("latin-1")] = value.decode("latin-1")
    return response


def console_endpoint(
    handler: Callable[[HttpRequest, AbstractBaseUser], Awaitable[Reply]],
) -> Callable[..., Awaitable[HttpResponse]]:
    """Authenticate the console token and turn failures into HTTP-MQ envelopes."""

    @csrf_exempt
    async def view(request: HttpRequest, **kwargs: str) -> HttpResponse:
        try:
            user = await sync_to_async(_operator)(request)
            return _response(await handler(request, user, **kwargs))
        except ProxyError as exc:
            return _response(exc.reply())
        except EngineError as exc:
            unavailable = exc.code == "UNAVAILABLE"
            return _response(
                envelope(
                    503 if unavailable else 400,
                    message=str(exc),
                    error=exc.code,
                    headers={"Retry-After": "1"} if unavailable else None,
                )
            )

    view.__name__ = handler.__name__
    return view


def _config(policy: ConsumerPolicy, client_ids: list[str] | None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "consumer": policy.name,
        "topic": policy.topic.code,
        "messageModel": "BROADCASTING" if policy.mode == "broadcast" else "CLUSTERING",
        "maxPullSize": policy.batch_size,
        "consumeTimeoutInMillis": policy.ack_timeout_ms,
        "pullTimeoutInMillis": policy.pull_timeout_ms,
        "pause": policy.paused,
        "rateLimitEnabled": policy.rate_limit is not None,
        "limitRate": policy.rate_limit or DEFAULT_LIMIT_RATE,
        "startPosition": policy.start_position,
        "httpEnabled": policy.http_enabled,
    }
    if client_ids is not None:
        config["clientIds"] = client_ids
    return config


@console_endpoint
async def consumer_config(request: HttpRequest, user: AbstractBaseUser, consumer: str):
    """GET /mq/config/{consumer}: the consumer's current configuration."""
    if request.method != "GET":
        raise ProxyError(405, "BAD_PARAMETER", "use GET")
    policy = await sync_to_async(_managed_policy)(user, consumer)
    clients = None
    if policy.mode == "broadcast":
        async with engine_session() as engine:
            clients = await engine.broadcast_clients(policy.topic.code, policy.app.code)
    return ok(_config(policy, clients))


def _parse_config(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        raise bad_parameter("the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise bad_parameter("the body must be a JSON object")
    unknown = set(data) - FIELDS - {*READ_ONLY, "clientIds"}
    if unknown:
        raise bad_parameter(f"unknown fields: {', '.join(sorted(unknown))}")
    for name in SWITCHES:
        if isinstance(data.get(name), bool):
            data[name] = int(data[name])
    for name, (low, high) in RANGES.items():
        if name in data:
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise bad_parameter(f"{name} must be an integer from {low} to {high}")
    if "startPosition" in data and data["startPosition"] not in ("earliest", "latest"):
        raise bad_parameter("startPosition must be earliest or latest")
    if "retryMsgId" in data and not isinstance(data["retryMsgId"], str):
        raise bad_parameter("retryMsgId must be a message id")
    if not isinstance(data.get("consumer"), str) or not data["consumer"]:
        raise bad_parameter("consumer is required")
    if "clientId" in data and not isinstance(data["clientId"], str):
        raise bad_parameter("clientId must be a string")
    return data


def _apply(user: AbstractBaseUser, data: dict[str, Any]) -> ConsumerPolicy:
    policy = _managed_policy(user, data["consumer"])
    current = _config(policy, None)
    for name in READ_ONLY:
        if name in data and data[name] != current[name]:
            raise bad_parameter(f"{name} cannot be changed here (it is {current[name]!r})")
    if "clientId" in data and policy.mode != "broadcast":
        raise bad_parameter("clientId applies to broadcast consumers only", "CLIENT_ID_NOT_ALLOWED")
    mapping = {
        "maxPullSize": "batch_size",
        "consumeTimeoutInMillis": "ack_timeout_ms",
        "pullTimeoutInMillis": "pull_timeout_ms",
        "startPosition": "start_position",
    }
    changes = {field: data[key] for key, field in mapping.items() if key in data}
    if "pause" in data:
        changes["paused"] = bool(data["pause"])
    if data.get("rateLimitEnabled") == 0:
        changes["rate_limit"] = None
    elif "limitRate" in data or data.get("rateLimitEnabled") == 1:
        changes["rate_limit"] = data.get("limitRate", policy.rate_limit or DEFAULT_LIMIT_RATE)
    for field, value in changes.items():
        setattr(policy, field, value)
    if changes:
        policy.full_clean()
        policy.save()
    detail = {k: v for k, v in data.items() if k != "consumer"}
    record(user, "httpmq-config", f"consumer:{policy.name}", team=policy.app.team, detail=detail)
    return policy


async def _released_position(topic: str, delay_id: int, text: str) -> tuple[int, int]:
    """Where the delayed or timer message ``text`` (a :func:`proxy.httpmq.messages.delayed_message_id`) was
    appended; 400 while it is still held, or when the topic no longer knows it."""
    async with engine_session() as engine:
        where = await engine.delayed_whereabouts(topic, delay_id)
    if where.partition is not None and where.index is not None:
        return where.partition, where.index
    if where.due_ms is not None:
        raise bad_parameter(f"message {text} is not delivered yet: it is due at {where.due_ms}")
    raise bad_parameter(f"message {text} is not known: never held, or released too long ago")


@console_endpoint
async def update_consumer_config(request: HttpRequest, user: AbstractBaseUser):
    """POST /mq/consumer/config: change only the fields present; 201 on success."""
    if request.method != "POST":
        raise ProxyError(405, "BAD_PARAMETER", "use POST with a JSON body")
    data = _parse_config(request.body)
    policy = await sync_to_async(_managed_policy)(user, data["consumer"])
    resend = None
    if "retryMsgId" in data:  # validated before anything is changed
        try:
            resend = parse_message_id(policy.topic.code, data["retryMsgId"])
        except ValueError as exc:
            raise bad_parameter(str(exc)) from None
        if resend[0] == DELAYED:
            resend = await _released_position(policy.topic.code, resend[1], data["retryMsgId"])
    policy = await sync_to_async(_apply)(user, data)
    if "resetOffsetTimestamp" in data or resend:
        async with engine_session() as engine:
            if "resetOffsetTimestamp" in data:
                await engine.reset_offsets(
                    policy.topic.code,
                    policy.app.code,
                    timestamp_ms=data["resetOffsetTimestamp"],
                    client_id=data.get("clientId"),
                )
            if resend:
                await engine.add_resend(
                    policy.topic.code, policy.app.code, [resend], client_id=data.get("clientId")
                )
    return ok()


def _unregister(user: AbstractBaseUser, name: str) -> None:
    policy = _managed_policy(user, name)
    policy.http_enabled = False
    policy.save()
    record(user, "httpmq-unregister", f"consumer:{policy.name}", team=policy.app.team)


@console_endpoint
async def unregister(request: HttpRequest, user: AbstractBaseUser):
    """POST /mq/unregister?consumer=: stop serving it over HTTP; its progress is kept."""
    if request.method != "POST":
        raise ProxyError(405, "BAD_PARAMETER", "use POST")
    name = request.GET.get("consumer") or request.POST.get("consumer")
    if not name:
        raise bad_parameter("consumer is required")
    await sync_to_async(_unregister)(user, name)
    return ok()


def _record(policy: ConsumerPolicy, topic, row: PartitionProgress) -> dict[str, Any]:
    return {
        "messageQueue": {
            "topic": policy.topic.code,
            "brokerName": broker_name(topic, row.partition),
            "queueId": row.partition,
        },
        "maxOffset": row.max_index,
        "committedOffset": row.ack_index,
        "lockTimestamp": row.lock_token if row.lock_token else 0,
        "lastConsumeTimestamp": row.last_access_ms or -1,
        "lastConsumeClientIp": row.last_address,
        "firstConsume": row.ack_index < 0,
        "newerMaxOffset": row.max_index,
    }


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fetch order: larger backlog first, then least recently consumed."""
    return sorted(
        rows,
        key=lambda r: (-(r["maxOffset"] - max(r["committedOffset"], 0)), r["lastConsumeTimestamp"]),
    )


async def _progress(request: HttpRequest, user: AbstractBaseUser, broadcast: bool):
    name = request.GET.get("consumer")
    if not name:
        raise bad_parameter("consumer is required")
    policy = await sync_to_async(_managed_policy)(user, name)
    if (policy.mode == "broadcast") != broadcast:
        kind = "broadcast" if policy.mode == "broadcast" else "clustering"
        raise bad_parameter(f"consumer {name} consumes by {kind}")
    async with engine_session() as engine:
        topic = engine.topic(policy.topic.code)
        if not broadcast:
            rows = await engine.progress(policy.topic.code, policy.app.code)
            return ok(_sorted([_record(policy, topic, r) for r in rows]))
        result = {}
        for client in await engine.broadcast_clients(policy.topic.code, policy.app.code):
            rows = await engine.progress(policy.topic.code, policy.app.code, client_id=client)
            result[client] = _sorted([_record(policy, topic, r) for r in rows])
        return ok(result)


@console_endpoint
async def clustering_offsets(request: HttpRequest, user: AbstractBaseUser):
    """GET /mq/clustering/queue/offset?consumer=: queue offset records."""
    return await _progress(request, user, broadcast=False)


@console_endpoint
async def broadcast_offsets(request: HttpRequest, user: AbstractBaseUser):
    """GET /mq/broadcast/queue/offset?consumer=: records per registered clientId."""
    return await _progress(request, user, broadcast=True)
