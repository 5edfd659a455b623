"""The `soma` command line starts without torch (the aim soma/__init__.py states): importing
soma.cli, `soma --help`, the help of `soma keys`, `soma bucket serve` and `soma status`, and
making a roster's keys (`soma keys`: signing reads and writes records as JSON, soma.store's
record_json) import no torch, so they cost a fraction of a second of CPU, not torch's
seconds. The store package imports its tensor modules on first use (soma/store/__init__.py),
soma.round its modules likewise, and the commands theirs when they run.

Each is checked in a fresh interpreter (this one has imported torch long ago), which applies
SOMA_MUTANT as this process does (tests/inherited/sitecustomize.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HANG

pytestmark = pytest.mark.slow  # each test starts an interpreter

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
INHERITED = TESTS / "inherited"

# `soma ARGV` in-process, its stdout kept aside; prints what it said and whether torch came.
PROBE = """
import contextlib, io, json, sys

from soma.cli import main

said = io.StringIO()
with contextlib.redirect_stdout(said):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps({"said": said.getvalue(), "torch": "torch" in sys.modules}))
"""


def python(*args: str) -> str:
    """`python ARGS` in a fresh interpreter; its stdout (a failure shows its stderr)."""
    path = [str(INHERITED), str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=HANG
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_command_line_imports_no_torch() -> None:
    said = python("-c", "import sys, soma.cli; print('torch' in sys.modules)")
    assert said.strip() == "False"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["keys", "--help"],
        ["keys", "merge", "--help"],
        ["bucket", "serve", "--help"],
        ["status", "--help"],
    ],
    ids=" ".join,
)
def test_a_commands_help_imports_no_torch(argv: list[str]) -> None:
    ran = json.loads(python("-c", PROBE, *argv).splitlines()[-1])
    assert ran["said"].startswith("usage: soma"), ran["said"]
    assert ran["torch"] is False, f"soma {' '.join(argv)} imported torch"


def test_making_keys_imports_no_torch(tmp_path) -> None:
    argv = ["keys", "--out", str(tmp_path / "keys"), "--client", "0-2"]
    ran = json.loads(python("-c", PROBE, *argv).splitlines()[-1])
    assert set(json.loads(ran["said"])) == {"0", "1", "2"}
    assert ran["torch"] is False, "soma keys imported torch"
