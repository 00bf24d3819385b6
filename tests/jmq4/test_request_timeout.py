"""A JMQ4 request whose header sendTime is older than the request timeout is refused with
code 22 (request timeout) and not executed (issue 20 item 9): its client gave up on it, and
a broker resumed from a pause must not store what waited in its socket. Older than the
connection's other requests: a client whose clock runs behind ours is served."""

from __future__ import annotations

import pytest

from brokers.protocols.jmq4 import (
    AddConnectionRequest,
    Code,
    CommandType,
    FetchHealthRequest,
    HeartbeatRequest,
    QosLevel,
)
from brokers.servers.jmq4 import ServerConfig
from brokers.servers.jmq4.sendtime import WINDOW_MS, SendTimeBaseline
from tests.jmq4.conftest import Broker_
from tests.jmq4.raw import RawClient, frame_bytes, now_ms
from tests.jmq4.test_messaging import produce_request

pytestmark = pytest.mark.django_db

TIMEOUT_MS = ServerConfig().request_timeout_ms


async def _stored(broker: Broker_) -> list[int]:
    return [p.max_index for p in await broker.engine.progress("local", "app1", partitions=[0])]


async def test_an_old_produce_gets_code_22_and_stores_nothing(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    try:
        await raw.login("app1", catalog.token)
        before = await _stored(brokers[1])
        old = now_ms() - TIMEOUT_MS - 5_000  # sent, then the broker was paused past it
        reply = await raw.call(produce_request("local", 0, b"late"), request_id=3, send_time=old)
        assert reply.header.type == CommandType.BOOLEAN_ACK
        assert (reply.header.status, reply.header.request_id) == (Code.CN_REQUEST_TIMEOUT, 3)
        assert await _stored(brokers[1]) == before
        fresh = await raw.call(produce_request("local", 0, b"on time"), request_id=4)
        assert fresh.payload.topics[0].code == Code.SUCCESS
        assert await _stored(brokers[1]) != before
    finally:
        await raw.close()


async def test_an_old_one_way_produce_is_dropped_without_reply(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    try:
        await raw.login("app1", catalog.token)
        before = await _stored(brokers[1])
        old = now_ms() - TIMEOUT_MS - 5_000  # well past it: the login's own transit varies
        request = produce_request("local", 0, b"late")
        raw.send(frame_bytes(request, 5, qos=QosLevel.ONE_WAY, send_time=old))
        reply = await raw.call(HeartbeatRequest(), request_id=6)  # the next reply is this one
        assert (reply.header.request_id, reply.header.status) == (6, Code.SUCCESS)
        assert await _stored(brokers[1]) == before
    finally:
        await raw.close()


async def test_a_request_within_the_timeout_or_unstamped_is_served(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    try:
        for sent in (now_ms() - TIMEOUT_MS + 5_000, 0, now_ms() + 60_000):
            reply = await raw.call(FetchHealthRequest(), request_id=8, send_time=sent)
            assert reply.header.type == CommandType.FETCH_HEALTH_RESPONSE, sent
            assert reply.header.send_time == sent
    finally:
        await raw.close()


async def test_the_check_can_be_turned_off(catalog, redis_url):
    broker = Broker_(1, catalog.ports[1], redis_url)
    await broker.start(ServerConfig(request_timeout_ms=0))
    raw = await RawClient.open(catalog.ports[1])
    try:
        reply = await raw.call(FetchHealthRequest(), send_time=1_700_000_000_123)
        assert reply.header.type == CommandType.FETCH_HEALTH_RESPONSE
    finally:
        await raw.close()
        await broker.stop()


async def test_a_client_clock_behind_ours_is_served_and_still_judged(catalog, brokers):
    """A client 10 minutes behind logged in, produced and was heard (every request was
    refused before, the login included); a request 30 s older than its others is not."""
    raw = await RawClient.open(catalog.ports[1])
    behind = 10 * 60 * 1000
    try:
        login = await raw.call(
            AddConnectionRequest(app="app1", token=catalog.token),
            request_id=1,
            send_time=now_ms() - behind,
        )
        assert login.header.status == Code.SUCCESS, login
        produced = await raw.call(
            produce_request("local", 0, b"from behind"), request_id=2, send_time=now_ms() - behind
        )
        assert produced.payload.topics[0].code == Code.SUCCESS
        late = now_ms() - behind - TIMEOUT_MS - 5_000
        reply = await raw.call(produce_request("local", 0, b"late"), request_id=3, send_time=late)
        assert reply.header.status == Code.CN_REQUEST_TIMEOUT
    finally:
        await raw.close()


def test_the_baseline_is_the_connections_smallest_recent_delay():
    clock = SendTimeBaseline()
    t = 10_000_000
    assert not clock.stale(t - 600_000, 30_000, now_ms=t)  # the first sets the baseline
    assert not clock.stale(t + 10_000 - 600_000, 30_000, now_ms=t + 10_000)
    assert clock.stale(t + 20_000 - 630_001, 30_000, now_ms=t + 20_000)  # 30.001 s past it
    assert not clock.stale(t + 20_000 - 630_000, 30_000, now_ms=t + 20_000)
    assert not clock.stale(1_000, 0, now_ms=10**9)  # the check is off
    assert not clock.stale(0, 30_000, now_ms=10**9)  # unstamped
    assert not clock.stale(-5, 30_000, now_ms=10**9)
    # the client's clock is stepped back by 40 s: refused for at most two windows
    assert clock.stale(t + 25_000 - 640_000, 30_000, now_ms=t + 25_000)
    assert clock.stale(t + 60_000 - 640_000, 30_000, now_ms=t + 60_000)
    assert WINDOW_MS < 35_000
    assert not clock.stale(t + 95_000 - 640_000, 30_000, now_ms=t + 95_000)
