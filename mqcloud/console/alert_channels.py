"""The alert channels as platform admins see and resume them, on the alerts page and at
``/api/v1/alert-channels/``: each configured channel with its pause and the alerts waiting
for it, and ending a pause once the channel is fixed (audited ``alert-channel-resumed``;
what waited goes with the next minute's retry run)."""

from __future__ import annotations

from dataclasses import dataclass

from mqcloud.alerts import channels
from mqcloud.alerts.channels import ChannelState
from mqcloud.alerts.delivery import waiting_counts
from mqcloud.approvals.services import record


@dataclass(frozen=True)
class ChannelRow:
    """A configured channel and how many alerts wait for it."""

    state: ChannelState
    waiting: int


def rows() -> list[ChannelRow]:
    """Every configured channel (one query for the waiting counts)."""
    waiting = waiting_counts()
    return [ChannelRow(state, waiting[state.name]) for state in channels.states()]


def resume(user: object, name: str) -> channels.Channel | None:
    """End the pause of the configured channel ``name`` as ``user`` (audited); the channel
    (see :func:`mqcloud.alerts.channels.configured`), or None when none is called so."""
    found = channels.find(name)
    if found is not None:
        channels.resume(name, found.address)
        record(user, "alert-channel-resumed", f"alert-channel:{name}")
    return found
