"""Two mq processes serve one consumer group alternately: nothing lost, nothing doubled."""

from __future__ import annotations

import httpx
import pytest

from tests.httpmq.conftest import make_catalog, wait_known

pytestmark = pytest.mark.django_db


def test_alternating_services_consume_exactly_once(mq_urls):
    s = make_catalog(partitions=4)
    headers = {"Authorization": f"Bearer {s.token}"}
    clients = [httpx.Client(base_url=url, timeout=20, headers=headers) for url in mq_urls]
    try:
        for client in clients:
            wait_known(client, s)
        sent = {f"m{i}" for i in range(120)}
        for i, text in enumerate(sorted(sent)):
            r = clients[i % 2].post("/mq/produce", data={"producer": s.producer, "message": text})
            assert r.status_code == 200
        received: list[str] = []
        rid = None
        for turn in range(200):
            params = {"topic": s.topic, "consumer": s.consumer}
            if rid:
                params["requestId"] = rid  # acked by the OTHER process than the one that fetched
            body = clients[turn % 2].get("/mq/message", params=params).json()["result"]
            received += [m["message"] for m in body.get("msgList", [])]
            rid = body.get("requestId")
            if len(received) >= len(sent) and not rid:
                break
        assert len(received) == len(sent), "a message was delivered twice or not at all"
        assert set(received) == sent
    finally:
        for client in clients:
            client.close()
