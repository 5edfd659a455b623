"""The test session: mutants, the shared fixtures, and the tiers.

Tiers (markers, declared in pyproject.toml): `slurm` (needs the test cluster), `s3` (starts the
session's SeaweedFS), `workflow` (runs snakemake), `mutants` (reruns tests under each mutant),
`slow` (spawns processes or trains for seconds). Every test with none of them is also marked
`fast`: `python -m pytest -q -m fast` is the developer's tier, CI runs everything.

A test whose code or fixtures start a process is marked `slow` by tests/tiers.py's static rule,
and a fast test that starts one all the same fails at once (tiers.guarding, in the hooks below):
a test in the wrong tier is a loud failure, not a slow fast tier (tests/README.md).

CI runs three pytest-xdist workers on two cores (`-n 3 --dist loadgroup`, the README's
command: the Slurm tests mostly wait on the cluster, and with two workers a core idled a fifth
of the suite). Two tiers go to one worker whole (xdist_group): the Slurm tests share a cluster
of one node, and the mutants' runs are started by one fixture, two at a time. Being the
largest units, xdist hands them out first, one to each of two workers, and the other tests
fill in beside and after them, one at a time in collection order: under xdist every test that
starts a process comes before every fast one (longest first, as a scheduler of unequal jobs
does), so that the seconds-long snakemake tests of tests/workflow/, last by name, do not run
alone on one worker at the end while the others have nothing left; the fast tests, a second
or less each, fill every worker to the end.
"""

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

# Bytecode caches, whatever the environment says (Python's default, which some images turn
# off): the suite starts over a thousand Python processes that import soma from this tree,
# and without __pycache__ each compiles its modules again, as each xdist worker and each
# mutant's run rewrites the test modules again. Set here, before xdist starts its workers, so
# that they and every process a test starts inherit it (tests/README.md: where the time goes).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# A suite started inside an sbatch job (or an srun step, an array's task) is not itself a
# client's job: with these set, a fast test's holder records would name the job and its
# waits and claims ask squeue and sacct, which the fast tier forbids. Each test that plays a
# Slurm job sets its own (monkeypatch.setenv); the slurm tier submits real ones.
for _name in (
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_STEP_ID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
):
    os.environ.pop(_name, None)

import mutants  # noqa: E402

mutants.apply_from_environment()

import tiers as tier_rules  # noqa: E402
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
    if not tiers and tier_rules.item_starts_a_process(item):
        tiers.add("slow")
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
    if hasattr(config, "workerinput"):  # an xdist worker: its order is the order handed out
        items.sort(key=_fast)  # stable: the heavy tests first, in their order, then the fast


# The guard: while a fast test runs (its setup with every fixture set up for it, its call, and
# its teardown up to its function-scoped fixtures), starting a process raises
# tiers.StartedAProcess. A higher-scoped fixture's finalizer (a session's S3 server, say) runs
# in the teardown of whichever test comes last, unguarded: `_end_of_the_tests_teardown`.


def _fast(item: pytest.Item) -> bool:
    return item.get_closest_marker("fast") is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if not _fast(item):
        return (yield)
    with tier_rules.guarding(item.nodeid, "setup"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if not _fast(item):
        return (yield)
    with tier_rules.guarding(item.nodeid, "call"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    if not _fast(item):
        return (yield)
    with tier_rules.guarding(item.nodeid, "teardown"):
        return (yield)


@pytest.fixture(autouse=True)
def _end_of_the_tests_teardown() -> Iterator[None]:
    """The first function-scoped fixture set up, so the last torn down: the guard ends here,
    before the finalizers of fixtures that other tests share."""
    yield
    tier_rules.uninstall()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every client's key pair and the roster (tests/signed_runs.py), once a test module;
    a module that needs other keys defines its own `keys`."""
    from signed_runs import make_keys_and_roster

    folder = tmp_path_factory.mktemp("keys")
    make_keys_and_roster(folder)
    return folder
