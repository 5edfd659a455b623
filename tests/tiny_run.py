"""One finished tiny run for the whole session, registered in tests/conftest.py.

test_workflow (`finished`), test_progress (`watched`) and test_model (`workflow_run`) each read
a complete run of tests/fixtures/tiny.yaml (2 clients, 2 rounds, both baselines) and never
write to it: one snakemake run serves them all, not one each.
"""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The run's folder and what snakemake printed while it ran; read-only."""
    from helpers import ok, snakemake

    workdir = tmp_path_factory.mktemp("tiny-run")
    return workdir, ok(snakemake(workdir, "--cores", "2"))
