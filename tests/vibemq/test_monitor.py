"""Health and metrics on the monitoring port (§15): the broker process's own counters."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import redis.asyncio as aioredis

from brokers.clients.vibemq import VibeMQClient
from brokers.protocols.vibemq import Ack, encode_frame
from tests.vibemq.conftest import FAST, Broker


async def test_health_and_metrics(catalog, redis_url):
    b = Broker(1, redis_url)
    await b.start(dataclasses.replace(FAST, monitor_port=0))
    base = f"http://127.0.0.1:{b.server.monitor_port}"
    c = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
    try:
        async with httpx.AsyncClient(base_url=base) as http:
            before = (await http.get("/metrics")).json()
            await c.publish("mon", 1, message_id="m1")
            await c.publish("mon", 2, message_id="m2")
            await c.subscribe("mon")
            m = await c.receive()
            c.ack(m.id)
            await c.receive()  # m2 stays in flight
            await c.ping()

            health = await http.get("/health/")
            assert health.status_code == 200
            doc = health.json()
            assert doc["is_healthy"] is True and doc["status"] == "healthy"
            assert doc["active_connections"] == 1 and doc["queue_count"] >= 1
            assert doc["in_flight_messages"] == 1
            assert doc["total_messages_published"] == 2
            assert doc["total_messages_delivered"] == 2
            assert doc["memory_usage_mb"] > 0 and "T" in doc["timestamp"]

            metrics = (await http.get("/metrics")).json()
            assert metrics["total_messages_published"] - before["total_messages_published"] == 2
            assert metrics["total_messages_acknowledged"] == 1
            assert metrics["total_connections_accepted"] == 1
            assert metrics["total_connections_rejected"] == 0
            assert metrics["active_queues"] == 1 and metrics["in_flight_messages"] == 1
            assert metrics["memory_usage_bytes"] > 0
            assert metrics["average_delivery_latency_ms"] >= 0
            assert metrics["uptime"].count(":") == 2 and metrics["uptime_seconds"] >= 0
            for key in ("total_retries", "total_dead_lettered", "total_errors"):
                assert metrics[key] == 0

            # acks read together count one each: an unknown id and a repeated one do not
            for i in range(3):
                await c.publish("mon", i, message_id=f"r{i}")
            ids = [(await c.receive()).id for _ in range(3)]
            c.send_raw(
                b"".join(
                    encode_frame(Ack(id=c.next_id(), headers={"messageId": i}))
                    for i in [*ids, "nobody", ids[0]]
                )
            )
            await c.ping()
            metrics = (await http.get("/metrics")).json()
            assert metrics["total_messages_acknowledged"] == 4
            assert metrics["in_flight_messages"] == 1

            assert (await http.get("/nope")).status_code == 404
            assert (await http.post("/health")).status_code == 405
    finally:
        await c.close()
        await b.stop()


async def test_unhealthy_when_the_store_is_gone(catalog, redis_url):
    b = Broker(1, redis_url)
    await b.start(dataclasses.replace(FAST, monitor_port=0))
    port = b.server.monitor_port
    good = b.engine.redis
    try:
        # the engine's store no longer answers: an unreachable Redis
        b.engine.redis = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert reply.startswith(b"HTTP/1.1 503 ")
        assert b'"is_healthy":false' in reply and b'"status":"unhealthy"' in reply
    finally:
        await b.engine.redis.aclose()
        b.engine.redis = good
        await b.stop()
