"""Every core guarantee has a broken variant, and the suite must catch each one.

Each mutant from tests/mutants.py is applied (SOMA_MUTANT=name) to a fresh pytest
run of the tests registered as its catchers; that run must end with failures
(exit code 1), not pass, and not error out for some unrelated reason.

The runs are processes of their own, most of their time a torch import and one thread of
work, so two go at once (SOMA_MUTANT_WORKERS, 2 by default): every selected mutant's run is
started in order when the first of these tests runs, and each test waits for its own.
"""

import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import mutants
import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKERS = int(os.environ.get("SOMA_MUTANT_WORKERS", "2"))


def _run(name: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SOMA_MUTANT=name, OMP_NUM_THREADS="1")
    args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header"]
    return subprocess.run(
        args + mutants.CATCHERS[name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest):
    """Every selected mutant's run, started in the order the tests will ask for them."""
    selected = [
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    ]
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    started: dict[str, Future] = {name: pool.submit(_run, name) for name in selected}
    yield started
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("name", sorted(mutants.MUTANTS))
def test_the_suite_catches_the_mutant(name: str, runs: dict[str, Future]) -> None:
    result = runs[name].result()
    tail = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 1, (
        f"mutant {name} was not caught (exit {result.returncode}):\n{tail}"
    )
    assert " failed" in result.stdout, f"mutant {name}: no test failed:\n{tail}"


def test_every_mutant_names_catchers_that_exist() -> None:
    """A catcher is a path a test file moved from, or a typo: its run would error out (exit
    4), not fail, so say which mutant names which missing file before any run is started."""
    missing = {
        name: path
        for name, selectors in mutants.CATCHERS.items()
        for path in (s.split("::")[0] for s in selectors if s.startswith("tests/"))
        if not (ROOT / path).is_file()
    }
    assert missing == {}
