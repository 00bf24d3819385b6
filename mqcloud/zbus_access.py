"""Which topics are open to token-less zbus clients, in the words the console and the API
both use. :mod:`brokers.anonymous` decides and changes it (a topic is open when its team's
anonymous app has a producer and a consumer policy on it) and answers it for a whole
queryset in one query."""

from __future__ import annotations

OPEN_HELP = (
    "Whether token-less zbus clients may produce to and consume this topic: its team's"
    " anonymous app has a producer and a consumer policy on it (the topic's anonymous"
    " producer and consumer group). Anonymous VibeMQ clients, where the operator allows them,"
    " act the same way. The topic's zbus access token, if set, still applies. Changed by the"
    " zbus_open and zbus_close applications."
)
OPEN_LABEL = "Open to token-less zbus clients"
CLOSED_LABEL = "Closed: zbus clients need an app token"
