"""The test session: mutants, the shared fixtures, and the tiers.

Tiers (markers, declared in pyproject.toml): `slurm` (needs the test cluster), `s3` (starts the
session's SeaweedFS), `workflow` (runs snakemake), `mutants` (reruns tests under each mutant),
`slow` (spawns processes or trains for seconds). Every test with none of them is also marked
`fast`: `python -m pytest -q -m fast` is the developer's tier, CI runs everything.

CI runs two pytest-xdist workers (`-n 2 --dist loadgroup`, the README's command). Two tiers go
to one worker whole (xdist_group): the Slurm tests share a cluster of one node, and the
mutants' runs are started by one fixture, two at a time. Being the largest units, xdist hands
them out first, one to each worker, and the other tests fill in beside and after them.
"""

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

import mutants  # noqa: E402

mutants.apply_from_environment()

from s3_bucket import bucket  # noqa: E402,F401  (the session's S3 server, for any test file)
from tiny_run import tiny_run  # noqa: E402,F401  (one finished tiny run, read-only)

HEAVY = ("slurm", "s3", "workflow", "mutants", "slow")
WHOLE = ("slurm", "mutants")  # each run by one xdist worker, start to end


def _tiers_of(item: pytest.Item) -> set[str]:
    """The heavy tiers a test belongs to by where it lives and what it uses."""
    tiers = {m.name for m in item.iter_markers() if m.name in HEAVY}
    folder = Path(str(item.fspath)).relative_to(TESTS).parts[0]
    fixtures = set(getattr(item, "fixturenames", ()))
    # tests/slurm/test_slurm*.py use the cluster; the other files there test soma.slurm's
    # pure parts (the partition's limits) without one.
    if folder == "slurm" and Path(str(item.fspath)).name.startswith("test_slurm"):
        tiers.add("slurm")
    if folder == "test_mutations.py" and item.originalname == "test_the_suite_catches_the_mutant":
        tiers.add("mutants")
    if "bucket" in fixtures:
        tiers.add("s3")
    if "tiny_run" in fixtures:
        tiers.add("workflow")
    return tiers


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tiers = _tiers_of(item)
        for tier in sorted(tiers):
            item.add_marker(tier)
            if tier in WHOLE:
                item.add_marker(pytest.mark.xdist_group(tier))
        if not tiers:
            item.add_marker("fast")
