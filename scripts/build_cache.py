"""A cache of compiled broker modules shared by every checkout of this user
(``scripts/compile_brokers.py`` uses it): a fresh clone — CI's, a second worktree — takes
the builds of the modules whose sources it already compiled once instead of spending
Cython's and the C compiler's minutes on them again.

An entry is one extension file named by a digest of what makes the build (Cython's
version, its directives, the interpreter, the extension suffix: ``build_key``), the
module's name and its source's digest: a module is taken from the cache only as a build
of exactly that source, as the import finder of :mod:`brokers.compiled` requires anyway.
Entries are written to a temporary name and renamed into place, so a reader never sees a
half-written one; an entry not used for :data:`KEEP_DAYS` days is removed.

Where: ``$MQCLOUD_BUILD_CACHE``, else ``$XDG_CACHE_HOME/mqcloud/compiled``, else
``~/.cache/mqcloud/compiled``; ``MQCLOUD_BUILD_CACHE=off`` turns it off. This module uses
the standard library only (it runs before the dependencies may be there).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

CACHE_ENV = "MQCLOUD_BUILD_CACHE"
KEEP_DAYS = 30
"""An entry not taken or written for this many days is removed."""


def default_folder() -> Path | None:
    """The cache folder this environment asks for; None when it is turned off."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "no") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mqcloud" / "compiled"


class BuildCache:
    """Builds of single modules kept in ``folder``, for one ``build_key``."""

    def __init__(self, folder: Path, build_key: dict[str, str], suffix: str) -> None:
        self.folder = folder
        self._key = json.dumps(build_key, sort_keys=True)
        self._suffix = suffix

    def entry(self, module: str, source_digest: str) -> Path:
        """Where the build of ``module`` from the source with ``source_digest`` is kept."""
        name = hashlib.sha256("\0".join((self._key, module, source_digest)).encode()).hexdigest()
        return self.folder / f"{module}-{name[:32]}{self._suffix}"

    def take(self, module: str, source_digest: str, target: Path) -> bool:
        """Put the cached build of ``module`` at ``target`` (renamed into place: a running
        broker may have the old file mapped); False when there is none (or it cannot be
        read or copied: the module is compiled as if there were none)."""
        entry = self.entry(module, source_digest)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            staged = _copy_beside(entry, target)
            os.replace(staged, target)
        except OSError:
            return False
        with contextlib.suppress(OSError):  # a cache this user may only read still serves
            os.utime(entry)  # used: kept another KEEP_DAYS
        return True

    def put(self, module: str, source_digest: str, built: Path) -> None:
        """Keep ``built``, the build of ``module`` from that source (a cache that cannot be
        written only means the next checkout compiles it again)."""
        entry = self.entry(module, source_digest)
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            os.replace(_copy_beside(built, entry), entry)

    def prune(self, now: float | None = None) -> int:
        """Remove the entries not used for :data:`KEEP_DAYS` days (and temporary files of
        a copy that was interrupted, as old); how many were removed."""
        oldest = (time.time() if now is None else now) - KEEP_DAYS * 86400
        removed = 0
        try:
            entries = list(self.folder.iterdir())
        except OSError:
            return 0
        for path in entries:
            with contextlib.suppress(OSError):
                if path.is_file() and path.stat().st_mtime < oldest:
                    path.unlink()
                    removed += 1
        return removed


def _copy_beside(source: Path, target: Path) -> Path:
    """A copy of ``source`` in ``target``'s folder under a temporary name (removed again
    if the copy fails), to be renamed onto ``target``."""
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(handle)
    try:
        shutil.copyfile(source, name)
        os.chmod(name, 0o755)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return Path(name)
