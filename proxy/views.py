"""HTTP-MQ endpoints for producers and consumers (app token): produce, fetch, ack, unlock.

Thin adapters: parameters and envelopes here, every rule (who may produce and consume,
blacklists, pause, rate limits, locks, acks, offsets, broadcast) in the engine. Specification: shared/protocols/http-mq.md.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from brokers.engine import (
    DELAY_LEVELS,
    AccessDenied,
    CommitStatus,
    ConsumerPolicyInfo,
    EngineError,
    FetchStatus,
    Message,
    ProducerPolicyInfo,
    RateLimited,
    StoreUnavailable,
    java_hash,
)
from proxy import params as p
from proxy.auth import authorize, bearer_token
from proxy.envelope import ProxyError, bad_parameter, envelope, ok
from proxy.messages import (
    HTTPMQ_EXTENSION,
    broker_name,
    deliveries_to_list,
    message_id,
    offset_message_id,
)
from proxy.request_id import InvalidRequestId, RequestId
from proxy.runtime import Runtime, runtime

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_BATCH = 1000
ENGINE_STATUS = {
    "BAD_PARAMETER": 400,
    "CLIENT_ID_REQUIRED": 400,
    "CLIENT_ID_NOT_ALLOWED": 400,
    "OFFSET_ILLEGAL": 400,
    "FORBIDDEN": 403,
    "PRODUCER_NOT_FOUND": 404,
    "CONSUMER_NOT_FOUND": 404,
    "TOPIC_NOT_FOUND": 404,
    "MESSAGE_TOO_LARGE": 413,
    "RATE_LIMITED": 429,
    "UNAVAILABLE": 503,
}

Handler = Callable[[HttpRequest, dict[str, str], Runtime], Awaitable[HttpResponse]]


def endpoint(handler: Handler) -> Callable[[HttpRequest], Awaitable[HttpResponse]]:
    """Wrap a handler: GET/POST/OPTIONS only, parameters, envelope for every failure."""

    @csrf_exempt
    async def view(request: HttpRequest) -> HttpResponse:
        if request.method == "OPTIONS":
            return _preflight()
        if request.method not in ("GET", "POST"):
            return envelope(405, message="use GET or POST", error="BAD_PARAMETER")
        try:
            params = p.collect(request)
            return await handler(request, params, await runtime())
        except RequestDataTooBig:
            return envelope(413, message="request body too large", error="MESSAGE_TOO_LARGE")
        except ProxyError as exc:
            return exc.response()
        except EngineError as exc:
            status = ENGINE_STATUS.get(exc.code, 500)
            headers = {"Retry-After": "1"} if status == 503 else None
            if isinstance(exc, RateLimited):
                headers = {"Retry-After": str(max(1, -(-exc.retry_after_ms // 1000)))}
            return envelope(status, message=str(exc), error=exc.code, headers=headers)
        except Exception:
            log.exception("HTTP-MQ %s failed", request.path)
            return envelope(500, message="internal error", error="INTERNAL_ERROR")

    view.__name__ = handler.__name__
    return view


def _preflight() -> HttpResponse:
    response = HttpResponse(status=204)
    response["Access-Control-Allow-Origin"] = "*"
    response["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
    response["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
    return response


def peer_address(request: HttpRequest) -> str:
    """The client's address as the connection shows it — what blacklists see: the peer,
    or, only when the peer is a trusted proxy (HTTPMQ_TRUSTED_PROXIES), the first
    X-Forwarded-For entry or X-Real-IP."""
    peer = request.META.get("REMOTE_ADDR", "") or ""
    if peer in settings.HTTPMQ_TRUSTED_PROXIES:
        forwarded = request.headers.get("X-Forwarded-For", "").split(",")[0].strip()
        return forwarded or request.headers.get("X-Real-IP", "").strip() or peer
    return peer


def client_ip(request: HttpRequest, params: dict[str, str]) -> str:
    """The consumer's address as recorded (http-mq.md §3.1): ``clientIp``, else
    :func:`peer_address`. A client may name itself, but never past a blacklist."""
    if params.get("clientIp"):
        value = params["clientIp"]
        if len(value) > 64:
            raise bad_parameter("clientIp must be at most 64 characters")
        return value
    return peer_address(request)


def producer_for(rt: Runtime, request: HttpRequest, params: dict[str, str]) -> ProducerPolicyInfo:
    name = p.required(params, "producer")
    policy = rt.watcher.current.producer_named(name)
    if policy is None or not policy.http_enabled:
        raise ProxyError(404, "PRODUCER_NOT_FOUND", f"producer {name} is not registered for HTTP")
    authorize(rt.watcher.current, bearer_token(request, params), policy.app)
    return policy


def consumer_for(rt: Runtime, request: HttpRequest, params: dict[str, str]) -> ConsumerPolicyInfo:
    name = p.required(params, "consumer")
    topic = p.required(params, "topic")
    policy = rt.watcher.current.consumer_named(name)
    if policy is None or not policy.http_enabled:
        raise ProxyError(404, "CONSUMER_NOT_FOUND", f"consumer {name} is not registered for HTTP")
    authorize(rt.watcher.current, bearer_token(request, params), policy.app)
    if topic != policy.topic:
        raise bad_parameter(
            f"consumer {name} consumes {policy.topic}, not {topic}", "TOPIC_MISMATCH"
        )
    return policy


def _body(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > MAX_MESSAGE_BYTES:
        raise ProxyError(413, "MESSAGE_TOO_LARGE", "message over 4 MiB")
    return raw


async def _partition_for(rt: Runtime, policy: ProducerPolicyInfo, params: dict[str, str]):
    topic = rt.engine.topic(policy.topic)
    order_id = params.get("orderId", "")
    if order_id and p.boolean(params, "ordered"):
        raise bad_parameter("give orderId or ordered, not both")
    if order_id:
        return (java_hash(order_id) & 0x7FFFFFFF) % topic.partitions
    if p.boolean(params, "ordered"):
        return (await rt.redis.incr(f"order:{{{topic.code}}}") - 1) % topic.partitions
    return None


def _deliver_at(rt: Runtime, params: dict[str, str]) -> int | None:
    """Epoch ms of a delayed (delayLevel 1–18) or timer (deliveryTimestamp) message."""
    level = p.integer(params, "delayLevel", 1, len(DELAY_LEVELS))
    timestamp = p.integer(params, "deliveryTimestamp", 0, 2**53)
    if level is not None and timestamp is not None:
        raise bad_parameter("give delayLevel or deliveryTimestamp, not both")
    if level is not None:
        return rt.engine.now_ms() + DELAY_LEVELS[level - 1] * 1000
    if timestamp is not None:
        return max(timestamp, rt.engine.now_ms())
    return None


def _send_result(rt: Runtime, topic: str, partition: int, index: int, store_ms: int) -> dict:
    info = rt.engine.topic(topic)
    return {
        "sendStatus": "SEND_OK",
        "msgId": message_id(topic, partition, index),
        "offsetMsgId": offset_message_id(partition, index, store_ms),
        "messageQueue": {
            "topic": topic,
            "brokerName": broker_name(info, partition),
            "queueId": partition,
        },
        "queueOffset": index,
        "regionId": "DefaultRegion",
        "traceOn": False,
    }


def _delayed_result(rt: Runtime, topic: str, delay_id: int, deliver_at: int) -> dict:
    """The send result of a held message: no queue or offset yet (queueId/offset -1)."""
    return {
        "sendStatus": "SEND_OK",
        "msgId": f"{zlib.crc32(topic.encode()) & 0xFFFFFFFF:08x}ffffffff{delay_id:016x}",
        "offsetMsgId": f"ffffffff{delay_id:016x}{deliver_at & 0xFFFFFFFF:08x}",
        "messageQueue": {"topic": topic, "brokerName": "", "queueId": -1},
        "queueOffset": -1,
        "deliverAt": deliver_at,
        "regionId": "DefaultRegion",
        "traceOn": False,
    }


def _resend_later(
    rt: Runtime,
    policy: ProducerPolicyInfo,
    messages: list[Message],
    partition: int | None,
    address: str,
    times: int,
) -> None:
    async def resend() -> None:
        for attempt in range(times):
            await asyncio.sleep(min(30.0, 0.5 * 2**attempt))
            try:
                await rt.engine.append(
                    policy.topic, policy.app, messages, partition=partition, client_address=address
                )
                return
            except StoreUnavailable:
                continue
        log.error("producer %s: message lost after %d resend attempts", policy.name, times)

    asyncio.get_running_loop().create_task(resend())


@endpoint
async def produce(request: HttpRequest, params: dict[str, str], rt: Runtime) -> HttpResponse:
    """POST /mq/produce: one message."""
    policy = producer_for(rt, request, params)
    body = _body(p.required(params, "message"))
    keys = params.get("keys", "")
    if len(keys) > 100:
        raise bad_parameter("keys must be at most 100 characters")
    retries = p.integer(params, "asyncRetryTimesIfSendFailed", 1, 10)
    deliver_at = _deliver_at(rt, params)
    partition = await _partition_for(rt, policy, params)
    address = peer_address(request)
    message = Message(
        body=body,
        business_id=keys,
        attributes={"KEYS": keys} if keys else None,
        extension=HTTPMQ_EXTENSION,
    )
    if deliver_at is not None:
        delay_id = await rt.engine.append_delayed(
            policy.topic,
            policy.app,
            message,
            deliver_at_ms=deliver_at,
            partition=partition,
            client_address=address,
        )
        return ok(_delayed_result(rt, policy.topic, delay_id, deliver_at))
    try:
        result = await rt.engine.append(
            policy.topic, policy.app, [message], partition=partition, client_address=address
        )
    except StoreUnavailable:
        if not retries:
            raise
        _resend_later(rt, policy, [message], partition, address, retries)
        return envelope(
            300,
            message=f"send failed; {retries} background resends scheduled",
            error="SEND_PENDING",
        )
    return ok(
        _send_result(rt, policy.topic, result.partition, result.first_index, result.store_time_ms)
    )


def _batch_items(params: dict[str, str]) -> list[Any]:
    raw = p.required(params, "messages")
    try:
        items = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_parameter("messages must be a JSON array") from None
    if not isinstance(items, list) or not items:
        raise bad_parameter("messages must be a non-empty JSON array")
    if len(items) > MAX_BATCH:
        raise bad_parameter(f"at most {MAX_BATCH} messages per batch")
    return items


@endpoint
async def produce_batch(request: HttpRequest, params: dict[str, str], rt: Runtime) -> HttpResponse:
    """POST /mq/produce/batch: a JSON array of messages; a result per element."""
    policy = producer_for(rt, request, params)
    items = _batch_items(params)
    if params.get("delayLevel") or params.get("deliveryTimestamp"):
        raise bad_parameter("delayed and timer messages are produced one per request")
    partition = await _partition_for(rt, policy, params)
    results: list[dict[str, Any] | None] = [None] * len(items)
    accepted: list[tuple[int, Message]] = []
    for i, item in enumerate(items):
        text = item if isinstance(item, str) else orjson.dumps(item).decode()
        raw = text.encode("utf-8")
        if len(raw) > MAX_MESSAGE_BYTES:
            results[i] = {"status": 413, "message": "message over 4 MiB"}
        else:
            accepted.append((i, Message(body=raw, extension=HTTPMQ_EXTENSION)))
    if accepted:
        try:
            stored = await rt.engine.append(
                policy.topic,
                policy.app,
                [m for _, m in accepted],
                partition=partition,
                client_address=peer_address(request),
            )
        except (AccessDenied, RateLimited):
            raise  # refused as a whole (403 / 429): nothing was sent, no per-item result
        except EngineError as exc:
            for i, _ in accepted:
                results[i] = {"status": ENGINE_STATUS.get(exc.code, 500), "message": str(exc)}
        else:
            for (i, _), index in zip(accepted, stored.indexes, strict=True):
                results[i] = {
                    "status": 200,
                    "result": _send_result(
                        rt, policy.topic, stored.partition, index, stored.store_time_ms
                    ),
                }
    if all(r is not None and r["status"] == 200 for r in results):
        return envelope(200, result=results)
    return envelope(
        500, message="some messages failed to send", error="BATCH_FAILED", result=results
    )


def _request_id(request: HttpRequest, params: dict[str, str]) -> RequestId | None:
    raw = params.get("requestId", "")
    if not raw and p.boolean(params, "useCookie"):
        raw = request.COOKIES.get("rid", "")
    if not raw:
        return None
    try:
        return RequestId.decode(raw)
    except InvalidRequestId as exc:
        raise bad_parameter(str(exc), "INVALID_REQUEST_ID") from None


async def _acknowledge(
    rt: Runtime, policy: ConsumerPolicyInfo, rid: RequestId, client_id: str | None
) -> tuple[int, str]:
    """Apply the requestId's acknowledgement (§7); (status, message)."""
    info = rid.ack_info
    if not rid.broker or rid.offset < 0 or (rid.next_offset < rid.offset and not rid.force_ack):
        return 400, f"ack illegal {info}"
    try:
        result = await rt.engine.commit(
            policy.topic,
            policy.app,
            rid.queue,
            offset=rid.offset,
            next_offset=rid.next_offset,
            lock_time=rid.lock_time,
            force=rid.force_ack,
            client_id=client_id,
        )
    except EngineError as exc:
        if exc.code in ("BAD_PARAMETER", "OFFSET_ILLEGAL"):
            return 400, f"ack illegal {info}: {exc}"
        raise
    note = " lock expired" if result.lock_expired else ""
    messages = {
        CommitStatus.OK: f"ok {info}{note}",
        CommitStatus.LOCK_NOT_EXIST: f"lock not exist {info}",
        CommitStatus.LOCK_STALE: f"ack lockTime small than {result.stored_lock} {info}",
        CommitStatus.COMMITTED: f"offset has committed {info}{note}",
        CommitStatus.NOT_EQUAL: f"committedOffset not equal {result.committed} {info}{note}",
    }
    return 200, messages[result.status]


def _client_id(params: dict[str, str]) -> str | None:
    value = params.get("clientId") or None
    if value is not None and len(value) > 128:
        raise bad_parameter("clientId must be at most 128 characters")
    return value


async def _queue_info(
    rt: Runtime, policy: ConsumerPolicyInfo, partition: int, client_id: str | None, first: bool
) -> dict[str, Any]:
    info = rt.engine.topic(policy.topic)
    (row,) = await rt.engine.progress(
        policy.topic, policy.app, client_id=client_id, partitions=[partition]
    )
    return {
        "messageQueue": {
            "topic": policy.topic,
            "brokerName": broker_name(info, partition),
            "queueId": partition,
        },
        "maxOffset": row.max_index,
        "committedOffset": row.ack_index,
        "lockTimestamp": row.lock_token,
        "lastConsumeTimestamp": row.last_access_ms,
        "lastConsumeClientIp": row.last_address,
        "firstConsume": first,
        "newerMaxOffset": row.max_index,
    }


@endpoint
async def message(request: HttpRequest, params: dict[str, str], rt: Runtime) -> HttpResponse:
    """GET|POST /mq/message: acknowledge the previous batch, then fetch the next one."""
    policy = consumer_for(rt, request, params)
    client_id = _client_id(params)
    rid = _request_id(request, params)
    ack_info = None
    if rid is not None:
        status, text = await _acknowledge(rt, policy, rid, client_id)
        ack_info = {"status": status, "message": text}
    result: dict[str, Any] = {"msgListSize": 0, "retryMsgListSize": 0}
    if ack_info:
        result["ackInfo"] = ack_info
    address = client_ip(request, params)
    peer = peer_address(request)
    # Clustering consumers were pinned at approval (brokers.consumer_start); a partition
    # they have no position on yet only holds messages produced since, so it starts at its
    # beginning. A broadcast client starts per startPosition at its first access.
    fetched = await rt.engine.fetch(
        policy.topic,
        policy.app,
        owner=f"http:{address}",
        client_id=client_id,
        address=peer,
        reported_address=address,
        start_position=policy.start_position if client_id else "earliest",
    )
    if fetched.status is FetchStatus.NO_PARTITION:
        raise ProxyError(
            503,
            "NO_QUEUE_AVAILABLE",
            "every queue is locked by other clients",
            {"Retry-After": "1"},
        )
    if fetched.status is FetchStatus.BLACKLISTED:
        raise ProxyError(403, "FORBIDDEN", f"client {peer} may not consume {policy.name}")
    if fetched.status in (FetchStatus.PAUSED, FetchStatus.RATE_LIMITED):
        return _fetch_reply(request, params, result | {"status": fetched.status.value}, None)
    msg_list = deliveries_to_list(policy.topic, fetched.messages)
    result["status"] = fetched.status.value
    if msg_list:
        result["msgList"] = msg_list
        result["msgListSize"] = len(msg_list)
    resends = await rt.engine.take_resends(policy.topic, policy.app, client_id=client_id)
    if resends:
        result["retryMsgList"] = deliveries_to_list(policy.topic, tuple(resends))
        result["retryMsgListSize"] = len(result["retryMsgList"])
    new_rid = None
    if fetched.partition >= 0:
        result["queueInfo"] = await _queue_info(
            rt, policy, fetched.partition, client_id, fetched.first_consume
        )
        if fetched.lock_token:
            info = rt.engine.topic(policy.topic)
            new_rid = RequestId(
                broker_name(info, fetched.partition),
                fetched.partition,
                fetched.start,
                fetched.end,
                fetched.lock_token,
            ).encode()
            result["requestId"] = new_rid
    return _fetch_reply(request, params, result, new_rid)


def _fetch_reply(
    request: HttpRequest, params: dict[str, str], result: dict[str, Any], rid: str | None
) -> HttpResponse:
    response = ok(result)
    if p.boolean(params, "useCookie"):
        if rid:
            response.set_cookie("rid", rid, path="/", httponly=True, samesite="Lax")
        else:
            response.set_cookie("rid", "", path="/", max_age=0)
    return response


@endpoint
async def ack(request: HttpRequest, params: dict[str, str], rt: Runtime) -> HttpResponse:
    """/mq/ack: commit the batch named by requestId without fetching."""
    policy = consumer_for(rt, request, params)
    client_id = _client_id(params)
    rid = _request_id(request, params)
    if rid is None:
        raise bad_parameter("requestId is required", "INVALID_REQUEST_ID")
    status, text = await _acknowledge(rt, policy, rid, client_id)
    if status == 400:
        raise bad_parameter(text, "INVALID_REQUEST_ID")
    return envelope(200, message=text)


@endpoint
async def unlock(request: HttpRequest, params: dict[str, str], rt: Runtime) -> HttpResponse:
    """/mq/unlock: release the requestId's queue lock without committing."""
    policy = consumer_for(rt, request, params)
    client_id = _client_id(params)
    rid = _request_id(request, params)
    if rid is None:
        raise bad_parameter("requestId is required", "INVALID_REQUEST_ID")
    released = await rt.engine.unlock(
        policy.topic, policy.app, rid.queue, token=rid.lock_time, client_id=client_id
    )
    return envelope(200, message=f"{rid.ack_info} unlock:{'true' if released else 'false'}")
