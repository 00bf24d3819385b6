"""Let the web process close WebSockets with protocol close codes (1003, 1007, 1009).

Daphne passes an application's ``websocket.close`` code to Autobahn's ``sendClose``, which
accepts only 1000 and 3000–4999 from applications, so the codes VibeMQ's spec requires
(vibemq.md §16) raise inside daphne and the socket stays open. :func:`install` wraps
daphne's ``serverClose`` to send those three codes with Autobahn's own close-frame call
(what Autobahn itself does for them); every other code takes the normal path.
"""

from __future__ import annotations

PROTOCOL_CODES = frozenset({1003, 1007, 1009})


def install() -> None:
    """Patch daphne's server close once (a no-op without daphne)."""
    try:
        from daphne.ws_protocol import WebSocketProtocol
    except ImportError:  # pragma: no cover - the web process always has daphne
        return
    original = WebSocketProtocol.serverClose
    if getattr(original, "_vibemq_codes", False):
        return

    def server_close(self, code=None):  # type: ignore[no-untyped-def]
        if code in PROTOCOL_CODES:
            self.sendCloseFrame(code=code, isReply=False)
        else:
            original(self, code)

    server_close._vibemq_codes = True  # type: ignore[attr-defined]
    WebSocketProtocol.serverClose = server_close
