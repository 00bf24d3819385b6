"""HTTP-MQ endpoints for producers and consumers (app token): produce, fetch, ack, unlock.

Thin adapters: parameters and envelopes here, every rule (who may produce and consume,
blacklists, pause, rate limits, locks, acks, offsets, broadcast) in the engine, whose typed
refusals :func:`engine_error` maps to envelopes. Each handler takes a :class:`Request` and
the process's :class:`Runtime` and returns a :class:`Reply`. Specification:
shared/protocols/http-mq.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from brokers.engine import (
    DELAY_LEVELS,
    AccessDenied,
    CommitRequest,
    CommitResult,
    CommitStatus,
    ConsumerPolicyInfo,
    EngineError,
    FetchResult,
    FetchStatus,
    Message,
    ProducerPolicyInfo,
    RateLimited,
    StoreUnavailable,
    TopicInfo,
    commit_illegal,
    java_hash,
)
from brokers.protocols.json_escapes import first_lone_surrogate
from proxy.httpmq import params as p
from proxy.httpmq.auth import authenticate, authorize
from proxy.httpmq.envelope import ProxyError, Reply, bad_parameter, envelope, ok
from proxy.httpmq.messages import (
    HTTPMQ_EXTENSION,
    broker_name,
    delayed_message_id,
    deliveries_to_list,
    message_id,
    offset_message_id,
)
from proxy.httpmq.request import Request
from proxy.httpmq.request_id import InvalidRequestId, RequestId
from proxy.httpmq.runtime import Runtime

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
    "QUEUE_FULL": 503,
}
"""Engine refusal code → HTTP status (http-mq.md §1); any other code is a 500."""
WIRE_ERROR = {"QUEUE_FULL": "UNAVAILABLE"}
"""Engine codes the spec's table has no row for → the spec code of their status: a full
BlockPublisher queue takes no write for now, as an unavailable store (503, Retry-After:
the producer tries again later); the message says which."""

Handler = Callable[[Request, Runtime], Awaitable[Reply]]


def engine_error(exc: EngineError) -> Reply:
    """The envelope of an engine refusal: its code, the matching status, and Retry-After
    for 429 (the engine's wait) and 503."""
    status = ENGINE_STATUS.get(exc.code, 500)
    headers = {"Retry-After": "1"} if status == 503 else None
    if isinstance(exc, RateLimited):
        headers = {"Retry-After": str(max(1, -(-exc.retry_after_ms // 1000)))}
    error = "INTERNAL_ERROR" if status == 500 else WIRE_ERROR.get(exc.code, exc.code)
    return envelope(status, message=str(exc), error=error, headers=headers)


def producer_for(rt: Runtime, request: Request) -> ProducerPolicyInfo:
    """The HTTP-enabled producer named by ``producer``, if the token's app owns it."""
    name = p.required(request.params, "producer")
    snapshot = rt.catalog
    owner = authenticate(snapshot, request)
    policy = snapshot.producer_named(name)
    if policy is None or not policy.http_enabled:
        raise ProxyError(404, "PRODUCER_NOT_FOUND", f"producer {name} is not registered for HTTP")
    authorize(owner, policy.app)
    describe_client(rt, request, policy.app)
    return policy


def describe_client(rt: Runtime, request: Request, app: str) -> None:
    """List the requests of ``app``'s client under HTTP-MQ and its User-Agent."""
    rt.engine.client_described(
        request.peer_address, app, "http-mq", version=request.header(b"user-agent")
    )


def consumer_for(rt: Runtime, request: Request) -> ConsumerPolicyInfo:
    """The HTTP-enabled consumer named by ``consumer`` of ``topic``, if the token's app
    owns it."""
    params = request.params
    name = p.required(params, "consumer")
    topic = p.required(params, "topic")
    snapshot = rt.catalog
    owner = authenticate(snapshot, request)
    policy = snapshot.consumer_named(name)
    if policy is None or not policy.http_enabled:
        raise ProxyError(404, "CONSUMER_NOT_FOUND", f"consumer {name} is not registered for HTTP")
    authorize(owner, policy.app)
    describe_client(rt, request, policy.app)
    if topic != policy.topic:
        raise bad_parameter(
            f"consumer {name} consumes {policy.topic}, not {topic}", "TOPIC_MISMATCH"
        )
    return policy


def _body(text: str) -> bytes:
    raw = p.body_bytes(text)
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
        return await rt.engine.partition_in_turn(topic.code)
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


def _delayed_result(
    rt: Runtime, topic: str, delay_id: int, deliver_at: int, partition: int | None
) -> dict:
    """The send result of a held message: no offset yet (-1), and the queue it goes to
    when due (the produce's choice, else the round-robin's turn); -1 and no broker only
    when no queue was writable (one is chosen when due)."""
    queue = {"topic": topic, "brokerName": "", "queueId": -1}
    if partition is not None and partition >= 0:
        queue["brokerName"] = broker_name(rt.engine.topic(topic), partition)
        queue["queueId"] = partition
    return {
        "sendStatus": "SEND_OK",
        "msgId": delayed_message_id(topic, delay_id),
        "offsetMsgId": f"ffffffff{delay_id:016x}{deliver_at & 0xFFFFFFFF:08x}",
        "messageQueue": queue,
        "queueOffset": -1,
        "deliverAt": deliver_at,
        "regionId": "DefaultRegion",
        "traceOn": False,
    }


_resends: set[asyncio.Task[None]] = set()


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

    task = asyncio.get_running_loop().create_task(resend())
    _resends.add(task)  # held until done: the loop keeps only weak references to tasks
    task.add_done_callback(_resends.discard)


async def produce(request: Request, rt: Runtime) -> Reply:
    """POST /mq/produce: one message."""
    params = request.params
    policy = producer_for(rt, request)
    body = _body(p.required(params, "message"))
    keys = params.get("keys", "")
    if len(keys) > 100:
        raise bad_parameter("keys must be at most 100 characters")
    retries = p.integer(params, "asyncRetryTimesIfSendFailed", 1, 10)
    deliver_at = _deliver_at(rt, params)
    partition = await _partition_for(rt, policy, params)
    address = request.peer_address
    message = Message(
        body=body,
        business_id=keys,
        attributes={"KEYS": keys} if keys else None,
        extension=HTTPMQ_EXTENSION,
    )
    if deliver_at is not None:
        held = await rt.engine.append_delayed(
            policy.topic,
            policy.app,
            message,
            deliver_at_ms=deliver_at,
            partition=partition,
            client_address=address,
        )
        return ok(_delayed_result(rt, policy.topic, held.delay_id, deliver_at, held.partition))
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


_decode_batch = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_text = msgspec.json.Decoder(str).decode


def _batch_texts(params: dict[str, str]) -> list[str]:
    """The message texts of a batch (§2.2): a string element as it is, any other JSON
    value as its compact serialization — its own text without whitespace, so a number
    keeps every digit (parsed and written again, 123456789012345678901234567890 came
    out as 1.2345678901234568e+29)."""
    raw = p.required(params, "messages")
    try:
        items = _decode_batch(raw)
        if not items:
            raise bad_parameter("messages must be a non-empty JSON array")
        if len(items) > MAX_BATCH:
            raise bad_parameter(f"at most {MAX_BATCH} messages per batch")
        return [
            _decode_text(item)
            if item[:1] == b'"'
            else msgspec.json.format(item, indent=-1).decode()
            for item in map(bytes, items)
        ]
    except msgspec.ValidationError:
        raise bad_parameter("messages must be a non-empty JSON array") from None
    except msgspec.DecodeError:
        lone = first_lone_surrogate(raw.encode("utf-8", "surrogateescape"))
        if lone is not None:  # msgspec's own word for it is "Input data was truncated"
            raise bad_parameter(
                f"messages hold a lone UTF-16 surrogate {lone.decode('ascii')}:"
                " no text can carry it"
            ) from None
        raise bad_parameter("messages must be a JSON array") from None
    except RecursionError:  # msgspec's decoder and formatter stop near 1,000 levels
        raise bad_parameter("messages nest arrays or objects too deeply") from None


async def produce_batch(request: Request, rt: Runtime) -> Reply:
    """POST /mq/produce/batch: a JSON array of messages; a result per element."""
    params = request.params
    policy = producer_for(rt, request)
    texts = _batch_texts(params)
    if params.get("delayLevel") or params.get("deliveryTimestamp"):
        raise bad_parameter("delayed and timer messages are produced one per request")
    partition = await _partition_for(rt, policy, params)
    results: list[dict[str, Any] | None] = [None] * len(texts)
    accepted: list[tuple[int, Message]] = []
    for i, text in enumerate(texts):
        raw = text.encode("utf-8")
        if len(raw) > MAX_MESSAGE_BYTES:
            results[i] = {"status": 413, "message": "message over 4 MiB"}
        else:
            accepted.append((i, Message(body=raw, extension=HTTPMQ_EXTENSION)))
    if accepted:
        # independent messages (§2.2: a result each, failed ones resent alone): each meets
        # the topic's bound and the producer's rate limit in turn, in one engine call
        try:
            outcomes = await rt.engine.append_many(
                policy.topic,
                policy.app,
                [m for _, m in accepted],
                partition=partition,
                client_address=request.peer_address,
            )
        except AccessDenied:
            raise  # refused as a whole (403): nothing was sent, no per-item result
        except EngineError as exc:
            outcomes = [exc] * len(accepted)
        if all(isinstance(o, RateLimited) for o in outcomes):
            raise outcomes[0]  # nothing was sent: 429 with its Retry-After, as one produce
        for (i, _), outcome in zip(accepted, outcomes, strict=True):
            if isinstance(outcome, EngineError):
                code = ENGINE_STATUS.get(outcome.code, 500)
                results[i] = {"status": code, "message": str(outcome)}
            else:
                results[i] = {
                    "status": 200,
                    "result": _send_result(
                        rt,
                        policy.topic,
                        outcome.partition,
                        outcome.first_index,
                        outcome.store_time_ms,
                    ),
                }
    if all(r is not None and r["status"] == 200 for r in results):
        return envelope(200, result=results)
    return envelope(
        500, message="some messages failed to send", error="BATCH_FAILED", result=results
    )


def _request_id(request: Request) -> RequestId | None:
    params = request.params
    raw = params.get("requestId", "")
    if not raw and p.boolean(params, "useCookie"):
        raw = request.cookie("rid")
    if not raw:
        return None
    try:
        return RequestId.decode(raw)
    except InvalidRequestId as exc:
        raise bad_parameter(str(exc), "INVALID_REQUEST_ID") from None


def _illegal_ack(rid: RequestId) -> bool:
    """A requestId no commit can come of (§7: "ack illegal"): no broker name, or numbers
    the engine refuses to commit (answered here, so that a fetch still runs)."""
    return not rid.broker or commit_illegal(
        rid.offset, rid.next_offset, rid.lock_time, rid.force_ack
    )


def _commit_request(rid: RequestId) -> CommitRequest:
    return CommitRequest(rid.queue, rid.offset, rid.next_offset, rid.lock_time, rid.force_ack)


def _ack_info(rid: RequestId, result: CommitResult) -> tuple[int, str]:
    """The ackInfo of a commit that ran (§7): (status, message)."""
    info = rid.ack_info
    note = " lock expired" if result.lock_expired else ""
    messages = {
        CommitStatus.OK: f"ok {info}{note}",
        CommitStatus.LOCK_NOT_EXIST: f"lock not exist {info}",
        CommitStatus.LOCK_STALE: f"ack lockTime small than {result.stored_lock} {info}",
        CommitStatus.COMMITTED: f"offset has committed {info}{note}",
        CommitStatus.NOT_EQUAL: f"committedOffset not equal {result.committed} {info}{note}",
    }
    return 200, messages[result.status]


async def _acknowledge(
    rt: Runtime, policy: ConsumerPolicyInfo, rid: RequestId, client_id: str | None
) -> tuple[int, str]:
    """Apply the requestId's acknowledgement (§7); (status, message)."""
    if _illegal_ack(rid):
        return 400, f"ack illegal {rid.ack_info}"
    commit = _commit_request(rid)
    try:
        result = await rt.engine.commit(
            policy.topic,
            policy.app,
            commit.partition,
            offset=commit.offset,
            next_offset=commit.next_offset,
            lock_time=commit.lock_time,
            force=commit.force,
            client_id=client_id,
        )
    except EngineError as exc:
        if exc.code in ("BAD_PARAMETER", "OFFSET_ILLEGAL"):
            return 400, f"ack illegal {rid.ack_info}: {exc}"
        raise
    return _ack_info(rid, result)


def _client_id(params: dict[str, str]) -> str | None:
    value = params.get("clientId") or None
    if value is not None and len(value) > 128:
        raise bad_parameter("clientId must be at most 128 characters")
    return value


def _queue_info(info: TopicInfo, fetched: FetchResult, address: str) -> dict[str, Any]:
    """The queue offset record (§5) of the partition just locked (or, for NO_NEW_MSG,
    looked at: lockTimestamp 0), as the fetch saw it: the lock-and-read script returns the
    partition's position, so no second read."""
    return {
        "messageQueue": {
            "topic": info.code,
            "brokerName": broker_name(info, fetched.partition),
            "queueId": fetched.partition,
        },
        "maxOffset": fetched.max_index,
        "committedOffset": fetched.ack_index,
        "lockTimestamp": fetched.lock_token,
        "lastConsumeTimestamp": fetched.accessed_ms,
        "lastConsumeClientIp": address,
        "firstConsume": fetched.first_consume,
        "newerMaxOffset": fetched.max_index,
    }


async def message(request: Request, rt: Runtime) -> Reply:
    """GET|POST /mq/message: acknowledge the previous batch, fetch the next one and hand
    out queued resends — one engine call (on a single Redis, one script call)."""
    policy = consumer_for(rt, request)
    client_id = _client_id(request.params)
    rid = _request_id(request)
    result: dict[str, Any] = {"msgListSize": 0, "retryMsgListSize": 0}
    commit = None
    if rid is not None:
        if _illegal_ack(rid):
            result["ackInfo"] = {"status": 400, "message": f"ack illegal {rid.ack_info}"}
        else:
            commit = _commit_request(rid)
    address = request.client_ip()
    peer = request.peer_address
    # Clustering consumers were pinned at approval (brokers.consumer_start); a partition
    # they have no position on yet only holds messages produced since, so it starts at its
    # beginning. A broadcast client starts per startPosition at its first access.
    pulled = await rt.engine.commit_and_fetch(
        policy.topic,
        policy.app,
        commit=commit,
        owner=f"http:{address}",
        client_id=client_id,
        address=peer,
        reported_address=address,
        start_position=policy.start_position if client_id else "earliest",
    )
    if rid is not None and commit is not None:
        if pulled.commit is not None:
            status, text = _ack_info(rid, pulled.commit)
        else:
            status, text = 400, f"ack illegal {rid.ack_info}: {pulled.commit_error}"
        result["ackInfo"] = {"status": status, "message": text}
    fetched = pulled.fetched
    if fetched.status is FetchStatus.NO_PARTITION:
        if "ackInfo" in result:  # the ack was made: the client must hear how it went
            return envelope(
                503,
                message="every queue is locked by other clients",
                result={"ackInfo": result["ackInfo"]},
                error="NO_QUEUE_AVAILABLE",
                headers={"Retry-After": "1"},
            )
        raise ProxyError(
            503,
            "NO_QUEUE_AVAILABLE",
            "every queue is locked by other clients",
            {"Retry-After": "1"},
        )
    if fetched.status is FetchStatus.BLACKLISTED:
        raise ProxyError(403, "FORBIDDEN", f"client {peer} may not consume {policy.name}")
    if fetched.status in (FetchStatus.PAUSED, FetchStatus.RATE_LIMITED):
        return _fetch_reply(request, result | {"status": fetched.status.value}, None)
    illegal = fetched.status is FetchStatus.CORRECTED
    msg_list = deliveries_to_list(policy.topic, fetched.messages)
    result["status"] = "OFFSET_ILLEGAL" if illegal else fetched.status.value
    if msg_list:
        result["msgList"] = msg_list
        result["msgListSize"] = len(msg_list)
    info = rt.engine.topic(policy.topic)
    looked = fetched.status is FetchStatus.NO_NEW_MSG and fetched.partition >= 0
    if fetched.lock_token or looked:
        # a partition's batch (retries hold no partition lock), or the partition a fetch
        # of nothing looked at first (§3.1, §9 step 8): its record as the fetch left it
        result["queueInfo"] = _queue_info(info, fetched, address)
    if pulled.resends:
        result["retryMsgList"] = deliveries_to_list(policy.topic, pulled.resends)
        result["retryMsgListSize"] = len(result["retryMsgList"])
    new_rid = None
    if fetched.partition >= 0 and fetched.lock_token:
        # OFFSET_ILLEGAL (§3.2): the committed offset was outside the queue (retention
        # took what it had not acked, or past its end); the engine moved it and locked
        # the partition over nothing: the forceAck requestId commits the corrected
        # position and the next fetch reads from there.
        new_rid = RequestId(
            broker_name(info, fetched.partition),
            fetched.partition,
            fetched.corrected_from if illegal else fetched.start,
            fetched.start if illegal else fetched.end,
            fetched.lock_token,
            force_ack=illegal,
        ).encode()
        result["requestId"] = new_rid
    return _fetch_reply(request, result, new_rid)


def _fetch_reply(request: Request, result: dict[str, Any], rid: str | None) -> Reply:
    reply = ok(result)
    if p.boolean(request.params, "useCookie"):
        if rid:
            reply.header("Set-Cookie", f"rid={rid}; HttpOnly; Path=/; SameSite=Lax")
        else:
            reply.header("Set-Cookie", "rid=; Max-Age=0; Path=/")
    return reply


async def ack(request: Request, rt: Runtime) -> Reply:
    """/mq/ack: commit the batch named by requestId without fetching."""
    policy = consumer_for(rt, request)
    client_id = _client_id(request.params)
    rid = _request_id(request)
    if rid is None:
        raise bad_parameter("requestId is required")  # missing: §1 BAD_PARAMETER
    status, text = await _acknowledge(rt, policy, rid, client_id)
    if status == 400:
        raise bad_parameter(text, "INVALID_REQUEST_ID")
    return envelope(200, message=text)


async def unlock(request: Request, rt: Runtime) -> Reply:
    """/mq/unlock: release the requestId's queue lock without committing."""
    policy = consumer_for(rt, request)
    client_id = _client_id(request.params)
    rid = _request_id(request)
    if rid is None:
        raise bad_parameter("requestId is required")  # missing: §1 BAD_PARAMETER
    released = await rt.engine.unlock(
        policy.topic, policy.app, rid.queue, token=rid.lock_time, client_id=client_id
    )
    return envelope(200, message=f"{rid.ack_info} unlock:{'true' if released else 'false'}")


ROUTES: dict[str, Handler] = {
    "/mq/produce": produce,
    "/mq/produce/batch": produce_batch,
    "/mq/message": message,
    "/mq/ack": ack,
    "/mq/unlock": unlock,
}
"""The app-token endpoints by path."""
