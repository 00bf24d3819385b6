"""Front-ends outside the broker processes: the HTTP-MQ service (:mod:`proxy.httpmq`, its own
ASGI process under ``manage.py runproxy``) and VibeMQ over WebSocket (:mod:`proxy.vibemq_ws`,
a Channels consumer served by the web process)."""
