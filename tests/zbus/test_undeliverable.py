"""A queue message the zbus server cannot encode (a bug, never input: headers are filtered
to writable ones) is failed to the engine — retried after its backoff, dead-lettered past
the retry limit — not released, which made it due again at once and handed straight back
to the same consumer, again and again, while the others behind it waited."""

from __future__ import annotations

import pytest

from brokers.models import App
from brokers.protocols.zbus import EncodeError
from brokers.servers.zbus import queue as zbus_queue
from tests.zbus.conftest import Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def anonymous_app(catalog) -> str:
    """The code of the app token-less clients act as."""
    return App.objects.get(is_anonymous=True).code


@pytest.mark.parametrize("window", ["1", "-1"], ids=["long-poll", "streaming"])
async def test_a_message_that_cannot_be_encoded_is_failed_not_looped(
    broker, anonymous_app: str, monkeypatch, window: str
) -> None:
    real = zbus_queue.delivery_bytes
    attempts = 0

    def encode(record: bytes, **kwargs: object) -> bytes:
        nonlocal attempts
        if b"poison" in record:
            attempts += 1
            raise EncodeError("cannot encode")
        return real(record, **kwargs)

    monkeypatch.setattr(zbus_queue, "delivery_bytes", encode)
    client = await Raw.open(broker.port)
    try:
        for i, body in enumerate((b"first", b"poison", b"last")):
            await client.send(msg("cmd: produce", "mq: orders", f"msgid: p{i}", body=body))
            assert (await client.recv()).status == 200
        got = []
        for i in range(2):
            if window == "1" or i == 0:
                await client.send(
                    msg("cmd: consume", "mq: orders", f"msgid: c{i}", f"window: {window}")
                )
            got.append((await client.recv()).body)
        assert got == [b"first", b"last"]  # the one behind it is not held up
        if window == "1":
            await client.send(msg("cmd: consume", "mq: orders", "msgid: c9", "window: 1"))
        assert await client.silent(1.0)
        assert attempts == 1  # failed once, now waiting for its backoff: not handed back
        failures = await broker.engine.consume_failures([("orders", anonymous_app)])
        assert failures == {("orders", anonymous_app): 1}
    finally:
        await client.close()
