"""Held app tokens: a catalog change that drops a token calls back exactly the
connections that hold it; other apps' connections, released ones and tokens still active
are left alone, and one failing callback does not spare the rest."""

from __future__ import annotations

from brokers.engine import AppInfo, CatalogSnapshot, hash_token
from brokers.engine.credentials import Credentials


def catalog(**tokens: tuple[str, ...]) -> CatalogSnapshot:
    """Apps named by keyword, each with the given active tokens."""
    return CatalogSnapshot(
        version=1,
        apps={
            code: AppInfo(code=code, token_hashes=tuple(hash_token(t) for t in held))
            for code, held in tokens.items()
        },
    )


def test_a_dropped_token_calls_back_its_holders_only():
    current = {"snap": catalog(a=("a1",), b=("b1",))}
    credentials = Credentials(lambda: current["snap"])
    closed: list[str] = []
    a1 = credentials.hold("a1", lambda: closed.append("a-conn-1"))
    credentials.hold("a1", lambda: closed.append("a-conn-2"))
    credentials.hold("b1", lambda: closed.append("b-conn"))
    released = credentials.hold("a1", lambda: closed.append("released"))
    assert a1 is not None and a1.app == "a" and released is not None
    assert credentials.hold("nobody's", lambda: None) is None
    released.release()
    assert credentials.held() == 3

    current["snap"] = catalog(a=("a1", "a2"), b=("b1",))  # a second token: a1 still good
    credentials.revoke_stale(current["snap"])
    assert closed == []

    current["snap"] = catalog(a=("a2",), b=("b1",))  # a1 rotated away
    credentials.revoke_stale(current["snap"])
    assert sorted(closed) == ["a-conn-1", "a-conn-2"]
    credentials.revoke_stale(current["snap"])  # once only
    assert len(closed) == 2 and credentials.held() == 1

    current["snap"] = catalog(a=("a2",))  # app b deleted
    credentials.revoke_stale(current["snap"])
    assert closed[-1] == "b-conn" and credentials.held() == 0


def test_one_failing_close_does_not_spare_the_others():
    snap = catalog(a=("a1",))
    credentials = Credentials(lambda: snap)
    closed: list[int] = []

    def broken() -> None:
        raise RuntimeError("transport gone")

    credentials.hold("a1", broken)
    credentials.hold("a1", lambda: closed.append(2))
    credentials.revoke_stale(catalog(a=()))
    assert closed == [2] and credentials.held() == 0
