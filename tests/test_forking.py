"""The suite's fork server (tests/forking.py): a snakemake forked from it is the run a fresh
`python -m snakemake` would be: the caller's environment and working directory at the call,
its exit status and its output; a forked soma says what a fresh one says."""

from __future__ import annotations

import subprocess
import sys

import forking
import pytest


def test_a_forked_snakemake_runs_with_the_callers_environment_and_folder(tmp_path, monkeypatch):
    forking.context()  # the server first: what is set after it must still reach the run
    monkeypatch.setenv("SOMA_FORKING_PROBE", "set after the server started")
    (tmp_path / "Snakefile").write_text(
        "import os\n"
        "rule probe:\n"
        "    output: 'probe.txt'\n"
        "    run:\n"
        "        with open(output[0], 'w') as f:\n"
        "            f.write(os.environ['SOMA_FORKING_PROBE'] + '|' + os.getcwd())\n"
    )
    done = forking.snakemake(["--cores", "1"], cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout
    assert "1 of 1 steps (100%) done" in done.stdout
    assert (tmp_path / "probe.txt").read_text() == f"set after the server started|{tmp_path}"


def test_a_forked_snakemake_that_fails_says_why_and_exits_1(tmp_path):
    (tmp_path / "Snakefile").write_text("rule broken:\n    output: 'x'\n    shell: 'exit 3'\n")
    done = forking.snakemake(["--cores", "1"], cwd=tmp_path, timeout=600)
    assert done.returncode == 1
    assert "Error in rule broken" in done.stdout


@pytest.mark.parametrize("args", [["--help"], ["bogus"], ["status", "--store", "nowhere"]])
def test_a_forked_soma_says_what_a_fresh_one_says(tmp_path, args):
    forked = forking.soma(args, cwd=tmp_path, timeout=600)
    fresh = subprocess.run(
        [sys.executable, "-m", "soma.cli", *args], cwd=tmp_path, capture_output=True, text=True
    )
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )


def test_forked_processes_at_once_each_say_their_own_and_end_with_their_own_status(tmp_path):
    running = [forking.Forked("soma", args, tmp_path) for args in (["--help"], ["bogus"])]
    said = [process.communicate() for process in running]
    assert [process.returncode for process in running] == [0, 2]
    assert [process.poll() for process in running] == [0, 2]
    assert said[0][0].startswith("usage: soma") and said[0][1] == ""
    assert said[1][0] == "" and "invalid choice: 'bogus'" in said[1][1]
    running[0].kill()  # ended: nothing to kill, and no error
    assert running[0].communicate() == said[0]
