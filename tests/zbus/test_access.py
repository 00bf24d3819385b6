"""Tokens, error statuses and texts (zbus.md §8, §11.2, §12, §13.3)."""

from __future__ import annotations

import pytest

from tests.zbus.conftest import SECRET, Broker_, Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)


async def test_unknown_command_and_mq(raw: Raw) -> None:
    await raw.send(msg("cmd: fly", "msgid: f1"))
    got = await raw.recv()
    assert (got.status, got.body, got.msgid) == (400, b"Bad format: command(fly) not support", "f1")
    assert got.mq_reply
    for cmd in ("produce", "consume", "request"):
        await raw.send(msg(f"cmd: {cmd}", "mq: nothere", f"msgid: {cmd}"))
        got = await raw.recv()
        assert (got.status, got.body, got.msgid) == (404, b"MQ(nothere) Not Found", cmd)


async def test_mq_token(raw: Raw, catalog) -> None:
    await raw.send(msg("cmd: produce", "mq: secure", "msgid: a", body=b"x"))
    got = await raw.recv()
    assert (got.status, got.body) == (403, b"MQ(secure) forbbiden, token(null) mismatched")
    await raw.send(msg("cmd: consume", "mq: secure", "msgid: b", "token: bad"))
    got = await raw.recv()
    assert (got.status, got.body) == (403, b"MQ(secure) forbbiden, token(bad) mismatched")
    await raw.send(msg("cmd: produce", "mq: secure", "msgid: c", f"token: {SECRET}", body=b"ok"))
    assert (await raw.recv()).status == 200
    # an app token with policies on the topic opens it too; a stranger app's does not
    await raw.send(
        msg("cmd: consume", "mq: secure", "msgid: d", f"token: {catalog.stranger_token}")
    )
    assert (await raw.recv()).status == 403
    await raw.send(msg("cmd: consume", "mq: secure", "msgid: e", f"token: {catalog.app_token}"))
    got = await raw.recv()
    assert (got.status, got.msgid, got.body) == (200, "e", b"ok")


async def test_admin_token_enforced(catalog, redis_url) -> None:
    from dataclasses import replace

    from tests.zbus.conftest import TEST_CONFIG

    b = Broker_(redis_url)
    await b.start(replace(TEST_CONFIG, admin_token="adm"))
    raw = await Raw.open(b.port)
    try:
        for sub in ("index", "data", "create_mq", "jquery"):
            await raw.send(msg("cmd: admin", f"sub_cmd: {sub}", "msgid: a1", body=b"{}"))
            got = await raw.recv()
            assert (got.status, got.body, got.msgid) == (
                403,
                b"admin forbidden, token mismatched",
                "a1",
            )
        await raw.send(msg(start="GET /?cmd=admin&&method=data&&token=adm HTTP/1.1"))
        assert (await raw.recv()).status == 200
        await raw.send(msg("cmd: admin", "sub_cmd: data", "token: adm"))
        assert (await raw.recv()).status == 200
    finally:
        await raw.close()
        await b.stop()


async def test_unknown_sub_command(raw: Raw) -> None:
    await raw.send(msg("cmd: admin", "sub_cmd: explode", "msgid: s"))
    got = await raw.recv()
    assert (got.status, got.body, got.msgid) == (404, b"sub_cmd=explode Not Found", "s")
