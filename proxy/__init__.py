"""HTTP-MQ proxy views and the Channels WebSocket consumers (served by the web process)."""
