"""The brokers' compiled hot path: Cython builds of the engine, server and codec modules,
loaded in place of their sources only while they are builds of exactly those sources.

``scripts/compile_brokers.py`` (run by ``scripts/bootstrap.sh``) compiles the modules of
:data:`PACKAGES` as they are — the ``.py`` files stay the only code — into
``.build/compiled`` and writes a manifest with each module's source digest. :func:`install`
(called by ``brokers/__init__.py``, so before any of those modules is imported) puts a
finder in front of the import system that loads a module's extension only when the
manifest's digest is the digest of the source on disk now, built for this interpreter: a
module edited since the build runs from its source, and a stale build never runs.

One rule for the code of these modules: no function or class is defined inside a coroutine
or generator. Compiled, a coroutine keeps its locals in one scope object and such a
function holds that scope: a reference cycle at every call, freed only by a collection — in
a broker with raised thresholds, collections of tens of thousands of objects that stalled
every connection for 20-30 ms. Use a function of the module or a method (with
``functools.partial`` where a callable is wanted); ``tests/servers/test_compiled.py``
checks the rule.

``MQCLOUD_PURE_PYTHON=1`` turns the finder off: everything runs from source (profilers that
read Python frames, such as py-spy, see no lines inside compiled code). This module uses
the standard library only: it runs before anything else of the project.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / ".build" / "compiled"
"""Where the builds live: ``lib/`` (the extensions, laid out as the packages), ``c/``
(Cython's C sources), ``tmp/`` (objects) and ``manifest.json``."""
MANIFEST = BUILD / "manifest.json"
PACKAGES = (
    "brokers.engine",
    "brokers.engine.catalog",
    "brokers.engine.sections",
    "brokers.protocols.jmq4",
    "brokers.protocols.vibemq",
    "brokers.protocols.zbus",
    "brokers.servers",
    "brokers.servers.jmq4",
    "brokers.servers.vibemq",
    "brokers.servers.zbus",
)
"""Packages whose modules (not their ``__init__``) are compiled: where a broker spends its
CPU per message."""
PURE_PYTHON_ENV = "MQCLOUD_PURE_PYTHON"


def ext_suffix() -> str:
    """The file suffix of an extension module for this interpreter."""
    return str(sysconfig.get_config_var("EXT_SUFFIX") or EXTENSION_SUFFIXES[0])


def source_of(module: str) -> Path:
    """The source file of a compiled module."""
    return REPO.joinpath(*module.split(".")).with_suffix(".py")


def extension_of(module: str, lib: Path | None = None) -> Path:
    """Where the build of ``module`` lies."""
    *package, name = module.split(".")
    return (lib or BUILD / "lib").joinpath(*package, name + ext_suffix())


def digest(source: bytes) -> str:
    """What the manifest records of a source: its SHA-256."""
    return hashlib.sha256(source).hexdigest()


def compiled_modules() -> list[str]:
    """Every module of :data:`PACKAGES`, by name, in a stable order."""
    names = []
    for package in PACKAGES:
        folder = REPO.joinpath(*package.split("."))
        for path in sorted(folder.glob("*.py")):
            if path.stem != "__init__":
                names.append(f"{package}.{path.stem}")
    return names


def pure_python() -> bool:
    """Whether this process was asked to run everything from source."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def current_build(module: str, want: str, lib: Path) -> Path | None:
    """The build of ``module`` under ``lib`` when it is a build of the source on disk now
    (``want``: the digest its manifest recorded); None otherwise."""
    try:
        have = digest(source_of(module).read_bytes())
    except OSError:
        return None
    extension = extension_of(module, lib)
    return extension if have == want and extension.is_file() else None


class CompiledFinder(MetaPathFinder):
    """Finds the build of a module when the manifest's digest matches its source now."""

    def __init__(self, modules: dict[str, str], lib: Path) -> None:
        self.modules = modules
        self.lib = lib
        self.loaded: list[str] = []
        """Modules this finder loaded from their build."""
        self.stale: list[str] = []
        """Modules run from source: edited (or removed) since their build, or their build
        is gone."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        want = self.modules.get(fullname)
        if want is None:
            return None
        extension = current_build(fullname, want, self.lib)
        if extension is None:
            self.stale.append(fullname)
            return None
        self.loaded.append(fullname)
        loader = ExtensionFileLoader(fullname, str(extension))
        return spec_from_file_location(fullname, extension, loader=loader)


def load_manifest(path: Path = MANIFEST) -> dict:
    """A build's manifest as written (how it was built, ``modules``: name → source
    digest); empty when there is none or it cannot be read as one."""
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(manifest, dict) or not isinstance(manifest.get("modules"), dict):
        return {}
    return manifest


def read_manifest(path: Path = MANIFEST) -> dict[str, str]:
    """The modules of a build for this interpreter and their source digests; empty when
    there is no build, it is unreadable, or it was made for another interpreter."""
    manifest = load_manifest(path)
    if manifest.get("ext_suffix") != ext_suffix():
        return {}
    return {str(k): str(v) for k, v in manifest["modules"].items()}


def install(build: Path = BUILD) -> CompiledFinder | None:
    """Put the finder of ``build`` first in ``sys.meta_path`` (once); None when pure
    Python is asked for or there is no usable build."""
    if pure_python():
        return None
    if (finder := active()) is not None:
        return finder
    modules = read_manifest(build / "manifest.json")
    if not modules:
        return None
    finder = CompiledFinder(modules, build / "lib")
    sys.meta_path.insert(0, finder)
    return finder


def active() -> CompiledFinder | None:
    """The finder installed in this process, if any."""
    for finder in sys.meta_path:
        if isinstance(finder, CompiledFinder):
            return finder
    return None


def describe() -> str:
    """How this process runs the hot path, in one line (the benchmarks print it)."""
    if pure_python():
        return f"brokers from source ({PURE_PYTHON_ENV}=1)"
    modules = read_manifest()
    names = compiled_modules()
    lib = BUILD / "lib"
    current = sum(
        1 for name in names if name in modules and current_build(name, modules[name], lib)
    )
    if not current:
        return "brokers from source (no build: scripts/compile_brokers.py)"
    return f"brokers compiled with Cython: {current} of {len(names)} hot-path modules"
