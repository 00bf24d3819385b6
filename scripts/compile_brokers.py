"""Compiles the brokers' hot path with Cython (``brokers/compiled.py`` says which modules,
where the builds go and when they are used): ``python scripts/compile_brokers.py
[--jobs N] [--strict]``, run by ``scripts/bootstrap.sh``.

Incremental: only the modules whose source changed since their build are compiled again
(all of them when Cython, its directives or the interpreter changed), and of those only
the ones the user's build cache (:mod:`build_cache`: every checkout's builds, by source)
does not hold. When a module cannot
be built (no C compiler, no Python headers, no Cython) it says so and exits 0 — the brokers
then run that module from its source, the same code with more CPU per message — unless
``--strict``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
os.environ["MQCLOUD_PURE_PYTHON"] = "1"  # this process imports nothing compiled

from build_cache import BuildCache, default_folder

from brokers import compiled

DIRECTIVES = {
    "language_level": 3,
    # Functions keep their Python face: introspection (inspect.iscoroutinefunction on
    # the engine facade), pickling and monkeypatching in tests work as on the sources.
    "binding": True,
    # Annotations stay documentation: a str subclass (Django's SafeString) or a duck-typed
    # argument is accepted as the source accepts it.
    "annotation_typing": False,
}


def build_key() -> dict[str, str]:
    """What every build depends on beside its source."""
    import Cython

    return {
        "cython": Cython.__version__,
        "directives": json.dumps(DIRECTIVES, sort_keys=True),
        "ext_suffix": compiled.ext_suffix(),
        "python": sys.version,
    }


def previous(key: dict[str, str], build_dir: Path) -> dict[str, str]:
    """The modules of the last build whose source digests still count (none when it was
    made differently)."""
    manifest = compiled.load_manifest(build_dir / "manifest.json")
    if not manifest or {k: manifest.get(k) for k in key} != key:
        return {}
    return dict(manifest["modules"])


def translate(name: str, build_dir: Path) -> str | None:
    """Cython's C source of one module; None when Cython cannot translate it (the module
    then runs from source)."""
    from Cython.Build import cythonize
    from Cython.Compiler.Errors import CompileError
    from setuptools import Extension

    try:
        cythonize(
            [Extension(name, [str(compiled.source_of(name).relative_to(compiled.REPO))])],
            build_dir=str(build_dir / "c"),
            compiler_directives=DIRECTIVES,
            quiet=True,
            # always: Cython skips a C file newer than its source, and a source restored
            # with an old mtime would be built from the C file of another version of it
            force=True,
        )
    except CompileError:
        return None
    return str(build_dir.joinpath("c", *name.split(".")).with_suffix(".c"))


def build(modules: dict[str, str], jobs: int, build_dir: Path) -> dict[str, str]:
    """Compile ``modules`` (name → digest of the source read) into the build; the ones
    built."""
    from setuptools import Distribution, Extension

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        translated = pool.map(translate, modules, [build_dir] * len(modules))
        sources = dict(zip(modules, translated, strict=True))
    for name, source in sources.items():
        if source is None:
            print(f"compile_brokers: Cython cannot translate {name}: it runs from source")
    extensions = [
        # Cython's generated C draws compiler warnings that say nothing about our code.
        Extension(name, [source], extra_compile_args=["-w"])
        for name, source in sources.items()
        if source
    ]
    dist = Distribution({"ext_modules": extensions, "script_name": "compile_brokers"})
    dist.verbose = 0
    command = dist.get_command_obj("build_ext")
    # Linked into a staging folder, then renamed into place: a running broker has the
    # old file mapped, and overwriting it in place would crash that broker.
    stage = build_dir / "stage"
    shutil.rmtree(stage, ignore_errors=True)
    command.build_lib = str(stage)
    command.build_temp = str(build_dir / "tmp")
    command.parallel = jobs
    command.force = True  # only modules whose source changed are here: build each anew
    command.ensure_finalized()
    command.run()
    built = {name: modules[name] for name, source in sources.items() if source}
    for name in built:
        target = compiled.extension_of(name, build_dir / "lib")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(compiled.extension_of(name, stage), target)
    shutil.rmtree(stage, ignore_errors=True)
    return built


def _modules(count: int) -> str:
    return f"{count} module" if count == 1 else f"{count} modules"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--strict", action="store_true", help="fail when a build fails")
    parser.add_argument("--build", type=Path, default=compiled.BUILD, help="build folder")
    parser.add_argument(
        "--modules", nargs="+", metavar="NAME", help="only these (default: all of PACKAGES)"
    )
    parser.add_argument(
        "--cache", type=Path, default=default_folder(),
        help="the build cache shared by checkouts (default: $MQCLOUD_BUILD_CACHE, else "
        "~/.cache/mqcloud/compiled)",
    )  # fmt: skip
    parser.add_argument("--no-cache", dest="cache", action="store_const", const=None)
    args = parser.parse_args(argv)
    build_dir = args.build.resolve()
    os.chdir(compiled.REPO)  # relative sources: Cython mirrors them under the build's c/
    try:
        key = build_key()
    except ImportError:
        print("compile_brokers: Cython is not installed: the brokers run from source")
        return 1 if args.strict else 0
    names = compiled.compiled_modules()
    unknown = sorted(set(args.modules or ()) - set(names))
    if unknown:
        parser.error(f"not a module of brokers.compiled.PACKAGES: {', '.join(unknown)}")
    # One build at a time per folder (make run and make test may start together): the
    # second waits, then finds the modules up to date.
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(build_dir.parent / f"{build_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _compile(args, key, names, build_dir)


def _compile(
    args: argparse.Namespace, key: dict[str, str], names: list[str], build_dir: Path
) -> int:
    done = previous(key, build_dir)
    wanted = {
        name: compiled.digest(compiled.source_of(name).read_bytes())
        for name in (args.modules or names)
    }
    todo = {
        name: sha
        for name, sha in wanted.items()
        if done.get(name) != sha or not compiled.extension_of(name, build_dir / "lib").is_file()
    }
    kept = {name: sha for name, sha in done.items() if wanted.get(name, sha) == sha}
    if not todo:
        print(f"compile_brokers: {_modules(len(kept))} up to date")
        return 0
    if not done:
        shutil.rmtree(build_dir, ignore_errors=True)
    build_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cache = BuildCache(args.cache, key, compiled.ext_suffix()) if args.cache else None
    failed = None
    if cache is not None:
        cache.prune()
        taken = {
            name: sha
            for name, sha in todo.items()
            if cache.take(name, sha, compiled.extension_of(name, build_dir / "lib"))
        }
        if taken:
            print(f"compile_brokers: {_modules(len(taken))} from the build cache {cache.folder}")
        kept.update(taken)
        todo = {name: sha for name, sha in todo.items() if name not in taken}
    if todo:
        print(f"compile_brokers: compiling {_modules(len(todo))} with Cython ({args.jobs} jobs)")
        try:
            built = build(todo, args.jobs, build_dir)
        except (Exception, SystemExit) as exc:  # a compiler error is a SystemExit in distutils
            failed = exc
        else:
            kept.update(built)
            if cache is not None:
                for name, sha in built.items():
                    cache.put(name, sha, compiled.extension_of(name, build_dir / "lib"))
    manifest = {**key, "modules": dict(sorted(kept.items()))}
    staged = build_dir / "manifest.json.new"  # a process starting now reads one whole
    staged.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(staged, build_dir / "manifest.json")
    if failed is not None:
        print(f"compile_brokers: the build failed ({failed}); those modules run from source")
        return 1 if args.strict else 0
    print(f"compile_brokers: done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
