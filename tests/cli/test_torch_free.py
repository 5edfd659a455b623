"""The `soma` command line and the workflow's summary job start without torch (the aim
soma/__init__.py states): importing soma.cli, `soma --help`, the help of `soma keys`, `soma
bucket serve` and `soma status`, making a roster's keys (`soma keys`: signing reads and writes
records as JSON, soma.store's record_json), `soma status` of a run of rounds (records only: no
tensor is read) and the summary job's modules import no torch, so they cost a fraction of a
second of CPU, not torch's seconds. The store package imports its tensor modules on first use
(soma/store/__init__.py), soma.round its modules likewise, and the commands theirs when they
run.

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

# `soma ARGV` in-process, its stdout kept aside; prints what it said, whether torch came and,
# if it did, the soma modules being imported when it was asked for (the first importer last).
PROBE = """
import contextlib, importlib.abc, io, json, sys

asked = []


class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" and not asked:
            frame = sys._getframe(1)
            while frame is not None:
                module = frame.f_globals.get("__name__", "")
                if module.startswith("soma") and module not in asked:
                    asked.insert(0, module)
                frame = frame.f_back
        return None


sys.meta_path.insert(0, Watch())
from soma.cli import main

said = io.StringIO()
with contextlib.redirect_stdout(said):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps({"said": said.getvalue(), "torch": "torch" in sys.modules, "by": asked}))
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


def test_the_workflows_summary_job_imports_no_torch() -> None:
    """The summary job (workflow/scripts/summary.py: its log, the table, the plot) reads
    receipts only; soma.workflow.common takes torch when a job trains or evaluates, so the
    last job of every run starts in 0.9 s of imports, not 2.4 s."""
    probe = "import sys\nfrom soma import workflow\nfrom soma.workflow import report\n"
    probe += "workflow.logged, report.summary_rows, report.round_costs, report.summary\n"
    said = python("-c", probe + "print('torch' in sys.modules)")
    assert said.strip() == "False"


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


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> str:
    """A store holding a finished run of rounds, `r` (FedAvg: its strategy keeps no state, so
    there is no privacy spent to load the strategy for)."""
    import soma

    store = tmp_path_factory.mktemp("finished") / "s"
    soma.simulate("soma.tasks.control", clients=2, rounds=2, store=store, run="r")
    return str(store)


@pytest.mark.parametrize(
    ("argv", "starts"),
    [(["--run", "r"], "round    0: 2/2 written"), ([], "r  rounds      2 of 2 averaged")],
    ids=["a run of rounds", "the store's runs"],
)
def test_the_status_of_a_run_imports_no_torch(finished, argv: list[str], starts: str) -> None:
    """`soma status` of a run of rounds, and of the store's runs, reads records only."""
    ran = json.loads(python("-c", PROBE, "status", "--store", finished, *argv).splitlines()[-1])
    assert ran["said"].startswith(starts), ran["said"]
    assert ran["torch"] is False, f"soma status imported torch, by {' -> '.join(ran['by'])}"
