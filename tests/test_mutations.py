"""Every core guarantee has a broken variant, and the suite must catch each one.

Each mutant from tests/mutants.py is applied (SOMA_MUTANT=name) to a fresh pytest
run of the tests registered as its catchers; that run must end with failures
(exit code 1), not pass, and not error out for some unrelated reason.

A run is a process of its own, forked from the suite's fork server (tests/forking.py), which
imported torch, soma, pytest and pytest's installed plugins once: a fresh interpreter would
spend several seconds of each run on those imports (hypothesis's plugin alone is the larger
part of a run whose catcher is one fast test), about 300 times. A forked run imports the tests and
conftest.py itself, so the mutant is applied as in a fresh process, and the server never
applies one. Two runs go at once (SOMA_MUTANT_WORKERS, 2 by default): every selected mutant's
run is started in order when the first of these tests runs, and each test waits for its own.
"""

import gc
import multiprocessing
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import forking
import mutants
import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKERS = int(os.environ.get("SOMA_MUTANT_WORKERS", "2"))
TIMEOUT = 900


def _catchers_under_mutant(name: str, out: str, environ: dict[str, str]) -> None:
    """In the forked run: output to `out`, the suite's environment (not the server's, which
    is whatever its process's was when some test started it) with SOMA_MUTANT set before
    conftest.py is imported (it applies the mutant), one torch thread as in every test
    process, then the catchers.
    What the server imported is frozen out of the garbage collector: pytest collects five
    times as it ends, and walking torch's and hypothesis's objects took seconds of every run."""
    gc.freeze()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.clear()
    os.environ.update(environ, SOMA_MUTANT=name, OMP_NUM_THREADS="1")
    os.chdir(ROOT)
    # -rs: a catcher skipped (a server that could not start) is named with its reason, or
    # the mutant's escape reads as a hole in the suite rather than a test that did not run
    args = ["-q", "-x", "-rs", "-p", "no:cacheprovider", "--no-header"]
    code = pytest.main(args + mutants.CATCHERS[name])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def _run(
    context: multiprocessing.context.BaseContext, name: str, folder: str, environ: dict[str, str]
) -> tuple[int, str]:
    out = os.path.join(folder, f"{name}.out")
    process = context.Process(target=_catchers_under_mutant, args=(name, out, environ), name=name)
    process.start()
    process.join(TIMEOUT)
    if process.is_alive():
        process.kill()
        process.join()
    text = Path(out).read_text(errors="replace") if os.path.exists(out) else ""
    return process.exitcode, text


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Every selected mutant's run, started in the order the tests will ask for them."""
    selected = [
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    ]
    context = forking.context()
    folder = str(tmp_path_factory.mktemp("mutants"))
    environ = dict(os.environ)  # the suite's, as the runs start
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    started: dict[str, Future] = {
        name: pool.submit(_run, context, name, folder, environ) for name in selected
    }
    yield started
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("name", sorted(mutants.MUTANTS))
def test_the_suite_catches_the_mutant(name: str, runs: dict[str, Future]) -> None:
    code, output = runs[name].result()
    tail = output[-3000:]
    if code == 0 and " passed" not in output:
        pytest.fail(f"mutant {name}: every catcher was skipped, so none ran:\n{tail}")
    assert code == 1, f"mutant {name} was not caught (exit {code}):\n{tail}"
    assert " failed" in output, f"mutant {name}: no test failed:\n{tail}"


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
