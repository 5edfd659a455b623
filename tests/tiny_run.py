"""One finished tiny run for the whole pytest run, registered in tests/conftest.py.

test_workflow (`finished`), test_progress (`watched`), test_model (`workflow_run`) and
test_model_described each read a complete run of tests/fixtures/tiny.yaml (2 clients, 2 rounds,
both baselines) and never write to it: one snakemake run serves them all, not one each.

Under pytest-xdist a session fixture is set up once in each worker, and CI's two workers each
made this run (about 35 s apiece, each on the critical path). So the first worker to need it
makes it in the folder every worker's temporary folder sits in, holding a lock there; a worker
that comes later waits for the lock (an event: the maker's process releases it when it is done
or dies) and reads what was made. A made run is named by `tiny-run.json`, written last and
whole: where it is missing (the maker failed), the next worker makes the run again, in a
folder of its own.
"""

from __future__ import annotations

import fcntl
import json
import tempfile
from pathlib import Path

import pytest


def _shared_folder(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this pytest run sees: in an xdist worker, the one that holds
    the workers' own (popen-gw0, popen-gw1...: xdist makes each worker's beneath the run's);
    otherwise this session's own, so that a mutant's run (tests/test_mutations.py, a pytest of
    its own started inside a worker) makes its tiny run under its mutant."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


@pytest.fixture(scope="session")
def tiny_run(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """The run's folder and what snakemake printed while it ran; read-only."""
    from helpers import ok, snakemake

    from soma.files import write_atomic

    shared = _shared_folder(pytestconfig, tmp_path_factory)
    made = shared / "tiny-run.json"
    with open(shared / "tiny-run.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if made.exists():
                run = json.loads(made.read_text())
                return Path(run["workdir"]), run["printed"]
            workdir = Path(tempfile.mkdtemp(prefix="tiny-run-", dir=shared))
            printed = ok(snakemake(workdir, "--cores", "2"))
            write_atomic(made, json.dumps({"workdir": str(workdir), "printed": printed}).encode())
            return workdir, printed
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
