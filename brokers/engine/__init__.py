"""The message engine on Redis: one engine behind every protocol front-end."""
