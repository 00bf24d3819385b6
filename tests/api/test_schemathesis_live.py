"""schemathesis against a live web process: the schema is what the API does.

``st run --checks all`` against a daphne serving the session's database with DEBUG off,
once as a team member and once as a platform admin; both must find 0 failures. The admin
run has every phase (examples, coverage, fuzzing, stateful); the member run skips the
coverage phase, the slowest (about three minutes here) and the least role-dependent, to
keep the pair near five minutes. The token comes from ``schemathesis_auth.py``, which
signs in and creates a new one whenever the run has revoked its own. Anonymous calls to
every operation of the schema must answer 401 with the JSON error body.
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
EXAMPLES = 12  # per operation in the fuzzing phase
SEED = 19
PASSWORD = "pw-Secret-123"  # tests.factories.user's
PHASES = {"member": "examples,fuzzing,stateful", "admin": "examples,coverage,fuzzing,stateful"}


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
        "run",
        f"{base}/api/schema/",
        "--checks",
        "all",
        "--phases",
        PHASES[role],
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
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
        command, capture_output=True, text=True, timeout=1500, cwd=report.parent, env=env
    )
    failures = []
    if report.exists():
        for line in report.read_text().splitlines():
            event = json.loads(line)
            if "ScenarioFinished" in event or "NonFatalError" in event:
                failures.append(event)
    return done.returncode, done.stdout + done.stderr, failures


@pytest.mark.timeout(1500)
@pytest.mark.xfail(
    reason="work in progress (issue 19): schema-valid requests still rejected with 400"
    " (references to objects that do not exist, an expiry in the past, messages past a"
    " partition's end); the run's findings are in st-output.txt of the test's tmp_path",
    strict=False,
)
@pytest.mark.parametrize("role", ["member", "admin"])
def test_schemathesis_finds_nothing(live_api, tokens, role, tmp_path):
    code, output, _ = run_schemathesis(live_api, role, tmp_path / "events.ndjson")
    (tmp_path / "st-output.txt").write_text(output)
    assert code == 0, output[-20000:]


def test_every_operation_needs_authentication(live_api, tokens):
    schema = httpx.get(
        f"{live_api}/api/schema/?format=json",
        headers={"Authorization": f"Bearer {tokens['member']}"},
    ).json()
    checked = 0
    with httpx.Client(base_url=live_api) as client:
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
    )
    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"
