"""Commands: runbroker, loaddemo, publishcatalog."""
