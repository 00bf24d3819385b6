"""schemathesis against a live web process: the schema is what the API does.

``st run --checks all`` against a daphne serving the session's database with DEBUG off,
once as a team member and once as a platform admin; both must find 0 failures, and the
test fails otherwise (it is the suite's gate on the schema telling the truth).

Settings are in ``schemathesis.toml`` at the repository root: every check for every
operation, except that the few operations whose requests name other objects (a team, an
app, a topic's partition …) or an expiry may answer a schema-valid request with 400,
because the schema cannot express "exists" or "in the future"; the file says which and
why.

Run time: CI runs the whole suite in under 30 minutes, so the pair must stay within four
minutes on the shared 2-core machine (measured over three runs at a load average of 3-5:
admin 130-142 s, member 37-42 s, under 3 min 10 s together with the servers' start). The admin run, which alone reaches every write, has every
phase: examples, coverage (about 120 s of its 140: boundary and wrong-type values of every
parameter and field, the phase that finds most), fuzzing and stateful at 5 examples per
operation. The member run skips coverage, the slowest phase and the least role-dependent,
and fuzzes at 12 examples per operation, where the team scoping shows. ``st`` sends two
requests at a time (``--workers 2``), so generating the next case overlaps the server
answering the last one.

The token comes from ``schemathesis_auth.py``, which signs in and creates a new one
whenever the run has revoked its own. Anonymous calls to every operation of the schema
must answer 401 with the JSON error body.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from brokers.catalog_loader import publish
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from tests import factories
from tests.httpmq.conftest import start_daphne, stop
from tests.scripts_path import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ST = Path(sys.executable).parent / "st"
AUTH_HOOKS = Path(__file__).with_name("schemathesis_auth.py")
CONFIG = Path(__file__).resolve().parents[2] / "schemathesis.toml"
SEED = 19
PASSWORD = "pw-Secret-123"  # tests.factories.user's
# Per role: phases, and examples per operation in the fuzzing and stateful phases.
RUNS = {
    "member": ("examples,fuzzing,stateful", 12),
    "admin": ("examples,coverage,fuzzing,stateful", 5),
}
WORKERS = 2  # st's concurrent requests: generation and the server overlap on two cores


@pytest.fixture
def live_api(tmp_path) -> Iterator[str]:
    """A daphne with DEBUG off on the test database."""
    port = free_port()
    proc = start_daphne(port, tmp_path / "web.log", DEBUG="false")
    yield f"http://127.0.0.1:{port}"
    stop(proc)


@pytest.fixture
def tokens(db, settings) -> dict[str, str]:
    """A small catalog, a team member and a platform admin with API tokens; their
    passwords hashed as the web process checks them (its sign-in makes fresh tokens)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    team = Team.objects.create(name="fuzz")
    cluster = factories.cluster_with_brokers("fuzz-cluster")
    topic = factories.topic("fuzz-topic", cluster, team)
    app, _ = factories.app("fuzz-app", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    ConsumerPolicy.objects.create(topic=topic, app=app, start_position="earliest")
    member = factories.user("member", team=team)
    admin = factories.user("admin", admin=True)
    publish()
    return {"member": factories.token_for(member), "admin": factories.token_for(admin)}


def run_schemathesis(base: str, role: str, report: Path) -> tuple[int, str, list[dict]]:
    """Run ``st`` with every check as ``role``; (exit code, output, failure events)."""
    command = [
        str(ST),
        "--config-file",
        str(CONFIG),
        "run",
        f"{base}/api/schema/",
        "--checks",
        "all",
        "--phases",
        RUNS[role][0],
        "--max-examples",
        str(RUNS[role][1]),
        "--seed",
        str(SEED),
        "--workers",
        str(WORKERS),
        "--report",
        "ndjson",
        "--report-ndjson-path",
        str(report),
        "--request-timeout",
        "30",
        "--suppress-health-check",
        "all",
        "--no-color",
    ]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": str(AUTH_HOOKS),
        "MQCLOUD_ST_BASE": base,
        "MQCLOUD_ST_USER": role,
        "MQCLOUD_ST_PASSWORD": PASSWORD,
    }
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=540, cwd=report.parent, env=env
    )
    failures = []
    if report.exists():
        for line in report.read_text().splitlines():
            event = json.loads(line)
            if "ScenarioFinished" in event or "NonFatalError" in event:
                failures.append(event)
    return done.returncode, done.stdout + done.stderr, failures


@pytest.mark.timeout(600)
@pytest.mark.parametrize("role", ["member", "admin"])
def test_schemathesis_finds_nothing(live_api, tokens, role, tmp_path):
    """0 failures with every check; the findings are in st-output.txt of tmp_path."""
    code, output, _ = run_schemathesis(live_api, role, tmp_path / "events.ndjson")
    (tmp_path / "st-output.txt").write_text(output)
    assert code == 0, output[-20000:]


def test_every_operation_needs_authentication(live_api, tokens):
    # A fresh server generates the schema on its first request: more than httpx's default
    # 5 s on a slow machine (a CI run timed out there), so the requests get 60.
    schema = httpx.get(
        f"{live_api}/api/schema/?format=json",
        headers={"Authorization": f"Bearer {tokens['member']}"},
        timeout=60,
    ).json()
    checked = 0
    with httpx.Client(base_url=live_api, timeout=60) as client:
        for path, operations in schema["paths"].items():
            concrete = path.replace("{id}", "1").replace("{code}", "x").replace("{name}", "x")
            for method in operations:
                if method not in {"get", "post", "put", "patch", "delete"}:
                    continue
                response = client.request(method.upper(), concrete)
                assert response.status_code == 401, f"{method.upper()} {path}"
                assert response.json()["error"] == "not_authenticated", f"{method} {path}"
                checked += 1
    assert checked >= 60


def test_malformed_multipart_body_is_json_400(live_api, tokens):
    """A body Twisted's multipart parser refuses reaches Django (no bare 400 from daphne)."""
    boundary = "c637e12e2b1a998d80d1b087531af51c"
    response = httpx.post(
        f"{live_api}/api/v1/consumers/fuzz-app.fuzz-topic/retries/skip/",
        content=f"--{boundary}--\r\n",
        headers={
            "Authorization": f"Bearer {tokens['member']}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
        timeout=60,  # the first request of a fresh server
    )
    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"
