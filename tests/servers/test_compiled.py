"""The compiled hot path (``brokers/compiled.py``, ``scripts/compile_brokers.py``): a build
is used only while it is a build of the source on disk, for this interpreter; the build is
incremental; the test session runs the brokers compiled."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from brokers import compiled
from tests.scripts_path import build_cache

SCRIPT = compiled.REPO / "scripts" / "compile_brokers.py"
MODULE = "brokers.protocols.zbus.aliases"  # small, imported by nothing at module level here


def _compile(build: Path, *modules: str, cache: Path | None = None) -> str:
    """Run the build script for ``modules`` into ``build``, with ``cache`` as its build
    cache (none by default: the tests do not touch the user's)."""
    env = {**os.environ, build_cache.CACHE_ENV: str(cache) if cache else "off"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--strict", "--build", str(build), "--modules", *modules],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _import_with(build: Path, module: str) -> dict[str, object]:
    """Import ``module`` in a fresh interpreter whose only finder of builds is ``build``'s:
    where it came from, and what the finder says."""
    code = f"""
import json, sys
from pathlib import Path
from brokers import compiled
sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, compiled.CompiledFinder)]
finder = compiled.install(Path({str(build)!r}))
import {module} as m
print(json.dumps({{"file": m.__file__, "finder": finder is not None,
    "loaded": finder.loaded if finder else [], "stale": finder.stale if finder else []}}))
"""
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_PYTHON_ENV}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=compiled.REPO,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("build-cache")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
    folder = tmp_path_factory.mktemp("compiled")
    out = _compile(folder, MODULE, cache=cache)
    assert "compiling 1 module " in out
    assert "from the build cache" not in out
    return folder


def test_another_checkout_takes_the_build_from_the_cache(
    build: Path, cache: Path, tmp_path: Path
) -> None:
    out = _compile(tmp_path / "build", MODULE, cache=cache)
    assert "1 module from the build cache" in out
    assert "compiling" not in out
    seen = _import_with(tmp_path / "build", MODULE)
    assert seen["file"] == str(compiled.extension_of(MODULE, tmp_path / "build" / "lib"))
    assert seen["loaded"] == [MODULE]


def test_the_cache_holds_builds_by_source_and_build(tmp_path: Path) -> None:
    key = {"cython": "3", "python": "3.11"}
    cache = build_cache.BuildCache(tmp_path / "cache", key, ".so")
    built = tmp_path / "built.so"
    built.write_bytes(b"the build of source A")
    cache.put(MODULE, "digest-a", built)
    target = tmp_path / "lib" / "m.so"
    assert not cache.take(MODULE, "digest-b", target)  # another source
    assert not cache.take("brokers.protocols.zbus.head", "digest-a", target)  # another module
    other_build = build_cache.BuildCache(tmp_path / "cache", {**key, "cython": "4"}, ".so")
    assert not other_build.take(MODULE, "digest-a", target)
    assert not target.exists()
    assert cache.take(MODULE, "digest-a", target)
    assert target.read_bytes() == b"the build of source A"
    assert [p.name for p in target.parent.iterdir()] == ["m.so"]  # no temporary left


def test_the_cache_forgets_what_was_not_used_for_a_month(tmp_path: Path) -> None:
    cache = build_cache.BuildCache(tmp_path / "cache", {"cython": "3"}, ".so")
    built = tmp_path / "built.so"
    built.write_bytes(b"x")
    cache.put("old", "d", built)
    cache.put("used", "d", built)
    month_ago = time.time() - (build_cache.KEEP_DAYS + 1) * 86400
    for name in ("old", "used"):
        os.utime(cache.entry(name, "d"), (month_ago, month_ago))
    assert cache.take("used", "d", tmp_path / "lib" / "used.so")  # a use keeps it
    assert cache.prune() == 1
    assert not cache.entry("old", "d").exists()
    assert cache.entry("used", "d").exists()


def test_the_cache_folder_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build_cache.CACHE_ENV, "off")
    assert build_cache.default_folder() is None
    monkeypatch.setenv(build_cache.CACHE_ENV, "/somewhere/cache")
    assert build_cache.default_folder() == Path("/somewhere/cache")
    monkeypatch.delenv(build_cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert build_cache.default_folder() == Path("/xdg/mqcloud/compiled")


def test_a_build_matching_its_source_is_loaded(build: Path) -> None:
    seen = _import_with(build, MODULE)
    assert seen["file"] == str(compiled.extension_of(MODULE, build / "lib"))
    assert seen["loaded"] == [MODULE]
    assert seen["stale"] == []


def test_a_build_of_another_source_is_not_loaded(build: Path, tmp_path: Path) -> None:
    other = tmp_path / "build"
    (other / "lib").mkdir(parents=True)
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["modules"][MODULE] = compiled.digest(b"what the source was at the build")
    (other / "manifest.json").write_text(json.dumps(manifest))
    os.symlink(build / "lib" / "brokers", other / "lib" / "brokers")
    seen = _import_with(other, MODULE)
    assert seen["file"] == str(compiled.source_of(MODULE))
    assert seen["stale"] == [MODULE]


def test_a_build_for_another_interpreter_is_not_used(build: Path, tmp_path: Path) -> None:
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["ext_suffix"] = ".cpython-399-x86_64-linux-gnu.so"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert compiled.read_manifest(tmp_path / "manifest.json") == {}
    (tmp_path / "manifest.json").write_text("{not json")
    assert compiled.read_manifest(tmp_path / "manifest.json") == {}
    assert compiled.read_manifest(tmp_path / "absent.json") == {}
    for not_a_manifest in ("[1]", json.dumps({"ext_suffix": compiled.ext_suffix(), "modules": 3})):
        (tmp_path / "manifest.json").write_text(not_a_manifest)
        assert compiled.load_manifest(tmp_path / "manifest.json") == {}
        assert compiled.read_manifest(tmp_path / "manifest.json") == {}


def test_pure_python_is_asked_for(build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled.PURE_PYTHON_ENV, "1")
    assert compiled.install(build) is None


def test_the_build_is_incremental(build: Path) -> None:
    assert "1 module up to date" in _compile(build, MODULE)


def test_only_modules_of_the_packages_are_compiled(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--build", str(tmp_path), "--modules", "mqcloud.settings"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "not a module of brokers.compiled.PACKAGES" in done.stderr
    names = compiled.compiled_modules()
    assert "brokers.servers.zbus.queue" in names
    assert not any(name.endswith("__init__") for name in names)


def test_this_session_runs_the_brokers_as_production_does() -> None:
    """``make test`` compiles first (bootstrap, then ``test_session.py``): every module
    of the hot path this process imported came from its build, none was stale."""
    finder = compiled.active()
    if compiled.pure_python():
        assert finder is None
        return
    assert finder is not None, "no build of the hot path: scripts/compile_brokers.py"
    assert finder.stale == [], (
        f"edited since the build (scripts/compile_brokers.py): {finder.stale}"
    )
    imported = [name for name in compiled.compiled_modules() if name in sys.modules]
    assert imported
    assert sorted(finder.loaded) == sorted(imported)


def _defined_inside_coroutines(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, outer, inner) of every function or class defined in the body of a
    coroutine or generator function (not counting those inside a further def)."""
    found = []
    for outer in ast.walk(tree):
        if not isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body_nodes = list(_own_nodes(outer))
        resumable = isinstance(outer, ast.AsyncFunctionDef) or any(
            isinstance(n, ast.Yield | ast.YieldFrom) for n in body_nodes
        )
        if not resumable:
            continue
        for node in body_nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.append((node.lineno, outer.name, node.name))
    return found


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, not descending into nested scopes."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def test_no_coroutine_of_the_hot_path_defines_a_function() -> None:
    """Compiled, a coroutine (or generator) keeps its locals in one scope object, and a
    function defined in it holds that scope: a reference cycle at every call, freed only
    by a collection (a stall of 20-30 ms in a broker). Pass arguments to a function of the
    module or a method instead, or bind them with functools.partial."""
    offenders = []
    for name in compiled.compiled_modules():
        path = compiled.source_of(name)
        for line, outer, inner in _defined_inside_coroutines(ast.parse(path.read_text())):
            offenders.append(f"{path.relative_to(compiled.REPO)}:{line} {inner} in {outer}")
    assert offenders == []


def test_the_rule_finds_a_closure_in_a_coroutine() -> None:
    tree = ast.parse(
        "async def outer():\n"
        "    async def inner(): pass\n"
        "def plain():\n"
        "    def fine(): pass\n"
        "def gen():\n"
        "    yield 1\n"
        "    class C: pass\n"
        "async def nested():\n"
        "    print(lambda: 1)\n"
    )
    assert _defined_inside_coroutines(tree) == [(2, "outer", "inner"), (7, "gen", "C")]
