"""The Slurm tests' fixtures: the cluster (skipped, with the reason, when it is not running)
and what one test starts on it (tests/slurm/harness.py)."""

from __future__ import annotations

import pytest
from slurm.cluster import cluster_running
from slurm.harness import Slurm


@pytest.fixture(scope="module")
def cluster() -> str:
    up, why = cluster_running()
    if not up:
        pytest.skip(why)
    return why


@pytest.fixture
def slurm(cluster, request):
    session = Slurm(request.node.name.removeprefix("test_"))
    yield session
    session.cleanup()
