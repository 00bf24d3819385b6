"""A VibeMQ publisher's message records its real address (host and port), not 127.0.0.1:0,
and the message browser names VibeMQ as the protocol that produced it."""

from __future__ import annotations

from mqcloud.console.message_properties import message_properties, producing_protocol


async def test_published_message_records_host_and_port(clients, broker):
    pub = await clients()
    await pub.publish("addressed", {"n": 1}, headers={"trace": "t-1"})
    local_port = pub._writer.get_extra_info("sockname")[1]
    stored = (await broker.engine.read("addressed", 0, 0, 1))[0].message
    assert stored.client_address == f"127.0.0.1:{local_port}"
    assert producing_protocol(stored) == "VibeMQ"
    assert message_properties(stored)["trace"] == "t-1"
