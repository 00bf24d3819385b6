"""The supervisord configuration of `make run`, made from the Procfile."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from tests.scripts_path import parse_procfile, render

ROOT = Path(__file__).resolve().parents[2]


def test_every_procfile_process_is_supervised_and_restarted(tmp_path):
    processes = parse_procfile((ROOT / "Procfile").read_text())
    names = [name for name, _ in processes]
    assert names == ["web", "proxy", "broker1", "broker2", "worker", "archive"]
    conf = configparser.RawConfigParser()
    conf.read_string(render(processes, tmp_path, ROOT))
    for name, command in processes:
        section = conf[f"program:{name}"]
        assert section["autorestart"] == "true" and section["stopasgroup"] == "true"
        assert section["command"] == f"/bin/sh -c 'exec {command}'"
    assert conf["supervisorctl"]["password"] == conf["unix_http_server"]["password"]


def test_percent_signs_and_quotes_survive(tmp_path):
    conf = configparser.ConfigParser()  # interpolating, as supervisord reads it
    conf.read_string(render([("x", "echo '50%' done")], tmp_path, ROOT))
    assert conf["program:x"]["command"] == "/bin/sh -c 'exec echo '\"'\"'50%'\"'\"' done'"


def test_a_line_that_is_not_a_process_is_refused():
    with pytest.raises(ValueError, match="not a Procfile line"):
        parse_procfile("web python -m daphne\n")
