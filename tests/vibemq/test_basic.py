"""Smoke: connect, publish, subscribe, deliver, ack."""

from __future__ import annotations


async def test_publish_subscribe_ack(clients):
    pub = await clients()
    sub = await clients()
    ack = await pub.publish("orders", {"n": 1}, headers={"k": "v"})
    assert ack.headers["messageId"] == ack.id and ack.queue == "orders"
    await sub.subscribe("orders")
    got = await sub.receive()
    assert got.payload == {"n": 1} and got.headers["k"] == "v" and got.attempts == 1
    sub.ack(got.id)
    await sub.ping()
    info = await pub.queue_info("orders")
    assert info["messageCount"] == 0
