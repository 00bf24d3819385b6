"""Alerts: backlog checks on consumers, deduplicated and throttled, sent by e-mail and webhook."""
