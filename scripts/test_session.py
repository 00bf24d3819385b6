"""Run pytest against a real PostgreSQL and Redis started for this test session.

Both servers get free loopback ports and a temporary data directory; their URLs are
exported as ``DATABASE_URL`` and ``REDIS_URL`` before pytest (and so Django) starts,
and both are stopped when pytest ends, whatever its outcome. ``make test`` runs this.
Arguments are passed to pytest unchanged. First the brokers' hot path is compiled where its
sources changed (``compile_brokers.py``; not with ``MQCLOUD_PURE_PYTHON=1``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from localservices import temporary_services

from brokers.compiled import pure_python


def main(argv: list[str]) -> int:
    """Start the services, run pytest with ``argv``, stop the services; pytest's exit code."""
    if not pure_python():
        # The tests load the brokers as they run in production: compiled where a module's
        # build matches its source (brokers/compiled.py). Rebuild what was edited first.
        here = Path(__file__).resolve().parent
        subprocess.call([sys.executable, str(here / "compile_brokers.py")])
    with (
        temporary_services("mqcloud-test-") as (postgres, redis),
        tempfile.TemporaryDirectory(prefix="mqcloud-test-exports-") as exports,
    ):
        env = {
            **os.environ,
            "DATABASE_URL": postgres.url,
            "REDIS_URL": redis.url,
            "EXPORT_DIR": exports,  # message exports: shared by the tests and their workers
            "MQCLOUD_TEST_SESSION": "1",
        }
        print(f"test services: PostgreSQL {postgres.url}  Redis {redis.url}", flush=True)
        return subprocess.call([sys.executable, "-m", "pytest", *argv], env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
