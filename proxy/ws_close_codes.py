"""Let the web process follow VibeMQ's WebSocket rules where daphne and Autobahn would not
(vibemq.md §16): close with protocol codes, and answer invalid UTF-8 as the spec says.

- Daphne passes an application's ``websocket.close`` code to Autobahn's ``sendClose``,
  which accepts only 1000 and 3000–4999 from applications, so the codes VibeMQ's spec
  requires (1003, 1007, 1009) raised inside daphne and the socket stayed open. The
  patched ``serverClose`` sends those three with Autobahn's own close-frame call (what
  Autobahn itself does for them); every other code takes the normal path.
- Autobahn validated text frames itself and dropped the TCP connection on invalid UTF-8
  (its ``failByDrop``): no error frame, no close code. §16 wants the ``INVALID_MESSAGE``
  error, then close 1007, as for bad JSON. So Autobahn's check is off, and a text
  message that is not UTF-8 reaches the application with its bad bytes as lone
  surrogates (``surrogateescape``), which the application refuses as invalid UTF-8.
"""

from __future__ import annotations

PROTOCOL_CODES = frozenset({1003, 1007, 1009})


def install() -> None:
    """Patch daphne's WebSocket protocol and factory once (a no-op without daphne)."""
    try:
        from daphne.ws_protocol import WebSocketFactory, WebSocketProtocol
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

    on_message = WebSocketProtocol.onMessage

    def on_message_any_text(self, payload, isBinary):  # type: ignore[no-untyped-def]
        try:
            on_message(self, payload, isBinary)
        except UnicodeDecodeError:  # raised before anything was queued
            text = payload.decode("utf-8", "surrogateescape")
            self.application_queue.put_nowait({"type": "websocket.receive", "text": text})

    WebSocketProtocol.onMessage = on_message_any_text

    factory_init = WebSocketFactory.__init__

    def factory_without_utf8_check(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        factory_init(self, *args, **kwargs)
        self.setProtocolOptions(utf8validateIncoming=False)  # kept: daphne sets others only

    WebSocketFactory.__init__ = factory_without_utf8_check
