"""Every core guarantee has a broken variant, and the suite must catch each one.

Each mutant from tests/mutants.py is applied (SOMA_MUTANT=name) to a fresh pytest
run of the tests registered as its catchers; that run must end with failures
(exit code 1), not pass, and not error out for some unrelated reason.
"""

import os
import subprocess
import sys
from pathlib import Path

import mutants
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(mutants.MUTANTS))
def test_the_suite_catches_the_mutant(name: str) -> None:
    env = dict(os.environ, SOMA_MUTANT=name)
    args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header"]
    result = subprocess.run(
        args + mutants.CATCHERS[name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 1, (
        f"mutant {name} was not caught (exit {result.returncode}):\n{tail}"
    )
    assert " failed" in result.stdout, f"mutant {name}: no test failed:\n{tail}"
