#!/usr/bin/env bash
# Install what mqcloud needs on a Debian machine, skipping whatever is already there:
# PostgreSQL, Redis, a Java 17 JDK (the runtime for PySpark; javac for the test that runs
# the 2015 zbus Java client), Chromium (browser tests), Python's venv, gcc and Python's
# headers, the Python dependencies of requirements.txt in .venv (reinstalled only when
# the file changes), and the compiled hot path of the brokers (rebuilt where it changed).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have_pg() { command -v pg_ctl >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; }
have_pg || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server redis-tools)
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
# The interpreter of .venv: Debian's python3 when it is 3.11 or newer. Distribution builds
# are compiled with PGO and LTO; a pyenv or source build without --enable-optimizations
# costs the brokers 15-25% more CPU per request (measured with bench/jmq4.py).
PYTHON=python3
if /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
  PYTHON=/usr/bin/python3
fi
"$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v runuser >/dev/null 2>&1 || need+=(util-linux)
# Browser tests drive Debian's Chromium through Playwright (never a downloaded browser).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v pgrep >/dev/null 2>&1 || need+=(procps)
# The brokers' hot path is compiled with Cython (scripts/compile_brokers.py): a C compiler
# and the interpreter's headers.
command -v gcc >/dev/null 2>&1 || need+=(gcc)
"$PYTHON" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' >/dev/null 2>&1 || need+=(python3-dev)

if [ ${#need[@]} -gt 0 ]; then
  echo "bootstrap: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# A .venv made from another interpreter is made again (its packages are reinstalled).
base=$("$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))')
have=$(.venv/bin/python -c 'import os, sys; print(os.path.realpath(sys._base_executable))' 2>/dev/null || true)
if [ "$have" != "$base" ]; then
  echo "bootstrap: creating .venv with $base"
  rm -rf .venv
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "bootstrap: installing Python dependencies"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" > "$stamp"
fi
# Compile what changed of the brokers' hot path (a no-op when nothing did).
.venv/bin/python scripts/compile_brokers.py
