"""Who a zbus request acts as (zbus.md §8, §11.2, §13.3, §13.3a).

The ``token`` of a produce, consume or request may be an mqcloud app token — the request
then acts as that app — or, for a client without one, the MQ's own access token: such a
client acts as the topic's anonymous app (where the MQ has an access token, only with
it). What the acting app may do on the MQ — its producer or consumer policy, blacklist,
pause, rate limit — is the engine's decision (:meth:`Engine.authorize_producer` and the
produce and consume operations); a topic is open to token-less clients only where its
anonymous app has policies (an MQ made by ``create_mq``, or a console topic whose team
opened it). Temp MQs, which live in one connection, keep their own token. The admin token
guards every admin request when it is configured.
"""

from __future__ import annotations

import hmac

from brokers.engine import CatalogSnapshot, hash_token
from brokers.servers.zbus.mqs import MqRef


class Forbidden(Exception):
    """The token does not open the MQ."""


def acting_app(snapshot: CatalogSnapshot, mq: MqRef, token: str | None) -> str:
    """The app the request acts as on ``mq`` (``""`` on a Temp MQ); raises
    :class:`Forbidden` when the token matches neither an app nor the MQ's access token."""
    if mq.remote is not None:
        expected_hash = mq.remote.token_hash
        if expected_hash and not hmac.compare_digest(expected_hash, hash_token(token or "")):
            raise Forbidden
        return ""
    if mq.temp is not None:
        if not mq.temp.opens_to(token):
            raise Forbidden
        return ""
    topic = mq.topic
    assert topic is not None
    app = snapshot.app_for_token(token)
    if app is not None:
        return app.code
    if topic.zbus_token_hash and not hmac.compare_digest(
        hash_token(token or ""), topic.zbus_token_hash
    ):
        raise Forbidden
    return topic.anonymous_app


def admin_allowed(configured: str, token: str | None) -> bool:
    """True when no admin token is configured or ``token`` equals it (constant time)."""
    if not configured:
        return True
    return hmac.compare_digest(configured.encode(), (token or "").encode())
