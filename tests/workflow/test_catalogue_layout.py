"""The Snakemake workflow catalogue's layout, and what a dry run says before any job.

`workflow/Snakefile` is the workflow, the checkout's `Snakefile` includes it (every other test
runs that one), `.test/config/config.yaml` is the tiny run `snakemake --directory .test`
makes. A dry run refuses at parse time, in one line naming the config key, what it can see
(an unwritable store, a task option of a type the task declares otherwise), and on a finished
run says how to see the DAG of rounds where Snakemake says only "Nothing to be done". The
first tutorial's round rerun, given the run's `clients_per_job`, reruns that round alone."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from helpers import NO_BASELINES, ROOT, TINY, ok, snakemake, snakemake_command

from soma.workflow.dry_run import HINT

WORKFLOW = ROOT / "workflow" / "Snakefile"


def jobs(printed: str) -> dict[str, int]:
    """Snakemake's "Job stats" table: rule -> jobs."""
    table = printed.split("Job stats:", 1)[1].split("total", 1)[0]
    return {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)\s*$", table, flags=re.M)}


def refused_at_parse(result: subprocess.CompletedProcess) -> str:
    """The refusal's line, of a snakemake that stopped reading the Snakefile."""
    assert result.returncode != 0, result.stdout[-3000:]
    assert "Building DAG" not in result.stdout, "refused before the DAG"
    lines = [line for line in result.stdout.splitlines() if line.startswith("config key")]
    assert len(lines) == 1, result.stdout[-3000:]
    return lines[0]


@pytest.mark.workflow
def test_the_catalogues_test_config_is_a_tiny_run_of_the_workflow_file(tmp_path) -> None:
    """`snakemake --directory .test` with workflow/Snakefile (as the catalogue's CI runs
    it): .test/config/config.yaml read over config/config.yaml. Dry, in a copy of .test/."""
    test = tmp_path / ".test"
    shutil.copytree(ROOT / ".test", test)
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(WORKFLOW), "--directory", str(test)]
        + ["--cores", "2", "-n"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    # 2 rounds of 2 clients, one job a round, no baselines
    assert jobs(out) == {"start": 1, "round": 2, "evaluate": 2, "model": 1, "best": 1,
                         "summary": 1, "all": 1}, out[-3000:]  # fmt: skip
    assert "results/tiny/round/1/average.json" in out


@pytest.mark.workflow
def test_the_checkouts_snakefile_runs_the_same_dag_as_the_workflow_file(tmp_path) -> None:
    from_root = ok(snakemake(tmp_path / "a", "-n"))
    command = [sys.executable, "-m", "snakemake", "-s", str(WORKFLOW), "-d", str(tmp_path / "b")]
    done = subprocess.run(
        [*command, "--configfile", str(TINY), "-n"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert jobs(from_root) == jobs(done.stdout + done.stderr)
    assert jobs(from_root)["all"] == 1, "the rule `all` is the default target of both"


@pytest.mark.workflow
def test_an_unwritable_store_is_refused_at_parse_time_in_one_line(tmp_path) -> None:
    line = refused_at_parse(snakemake(tmp_path, "-n", "--config", "store=/proc/x"))
    assert line.startswith("config key `store`: store /proc/x cannot be made in /proc"), line
    (tmp_path / "file").write_text("")
    line = refused_at_parse(snakemake(tmp_path, "-n", "--config", f"store={tmp_path}/file/s"))
    assert line.endswith(f"{tmp_path}/file is not a folder; give a store folder"), line


@pytest.mark.workflow
def test_a_task_option_of_the_wrong_type_is_refused_at_parse_time(tmp_path) -> None:
    options = 'task_options={"soma.tasks.digits": {"epochs": two}}'
    line = refused_at_parse(snakemake(tmp_path, "-n", "--config", options))
    assert line == (
        "config key `task_options`: option 'epochs' of task 'soma.tasks.digits' must be an "
        "integer, not 'two' (text)"
    ), line


@pytest.mark.workflow
def test_a_dry_run_of_a_finished_run_says_how_to_see_the_dag(tiny_run, tmp_path) -> None:
    workdir = tmp_path / "run"
    shutil.copytree(tiny_run[0], workdir, symlinks=True)
    printed = ok(snakemake(workdir, "-n"))
    assert "Nothing to be done" in printed and HINT in printed
    assert printed.count(HINT) == 1, "said once"
    forced = ok(snakemake(workdir, "-n", "-F"))
    assert HINT not in forced and jobs(forced)["train"] == 4, "-F lists every job"


@pytest.mark.workflow
def test_the_round_rerun_of_a_run_of_one_job_a_round_reruns_that_round_alone(tmp_path) -> None:
    """The first tutorial's recipe for a run made with `clients_per_job=10`, on a run of
    one job a round (2 clients, `clients_per_job=2`): given the run's value, round 1's job
    alone; without it, Snakemake would train the rounds before it again."""
    page = (ROOT / "docs" / "tutorials" / "first-run.md").read_text()
    recipe = next(
        " ".join(block.replace("\\\n", " ").split())
        for block in re.findall(r"```\n(R=3; snakemake.*?)```", page, flags=re.S)
        if "clients_per_job=10" in block
    )
    config = [TINY, NO_BASELINES]
    last = "results/tiny/round/1/average.json"  # the rounds the recipe plans again
    ok(snakemake(tmp_path, "--cores", "2", last, "--config", "clients_per_job=2", config=config))
    args = recipe.split("snakemake --cores 2 ", 1)[1].replace("$R", "1").replace("digits", "tiny")
    args = args.replace("clients_per_job=10", "clients_per_job=2").split()
    assert "--forcerun" in args and "--until" in args, recipe
    again = ok(snakemake(tmp_path, "-n", *args, config=config))
    assert jobs(again) == {"round": 1}, again[-3000:]
    assert "results/tiny/round/1/average.json" in again
    # the default's value on this run: the earlier round's clients trained again
    other = ok(snakemake(tmp_path, "-n", *args[args.index("--until") :], config=config))
    assert jobs(other).get("train", 0) > 0, "the recipe without the run's value"


@pytest.mark.workflow
def test_the_own_task_page_makes_a_small_task_one_job_a_round(tmp_path) -> None:
    page = (ROOT / "docs" / "tutorials" / "own-task.md").read_text()
    commands = [
        " ".join(block.replace("\\\n", " ").split())
        for block in re.findall(r"```\n(snakemake --cores 2 -s /path/to/soma.*?)```", page, re.S)
    ]
    assert len(commands) == 2, commands
    assert all("clients_per_job=4" in c and "clients=4" in c for c in commands)
    assert "'baselines={alone: false, centralized: false}'" in commands[1]
    assert "soma simulate --task mytask" in page
    code = page.split("```python\n# mytask.py", 1)[1].split("```", 1)[0]
    (tmp_path / "mytask.py").write_text("# mytask.py" + code)
    args = commands[1].split("--config ", 1)[1]
    done = subprocess.run(
        f"{sys.executable} -m snakemake -s {ROOT / 'Snakefile'} -d {tmp_path} -n --cores 2 "
        f"--config {args}",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    # a start, one job a round (which trains the four and averages), its evaluation, the end
    assert jobs(out) == {"start": 1, "round": 10, "evaluate": 10, "model": 1, "summary": 1,
                         "all": 1}, out[-3000:]  # fmt: skip


@pytest.mark.workflow
def test_a_store_on_a_read_only_mount_is_refused_by_a_dry_run(tmp_path) -> None:
    """A read-only tmpfs where the store would be made, in a mount namespace of its own
    (chmod does not stop root); skipped, saying why, where `unshare` cannot make one."""
    if shutil.which("unshare") is None:
        pytest.skip("no `unshare` (util-linux): a read-only mount needs a namespace of its own")
    (tmp_path / "ro").mkdir()
    store = tmp_path / "ro" / "store"
    command = snakemake_command(tmp_path / "w", "-n", "--config", f"store={store}")
    mount = 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"'
    for unshare in (["unshare", "-m"], ["unshare", "-rm"]):
        done = subprocess.run(
            [*unshare, "sh", "-c", mount, str(tmp_path / "ro"), *command],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if "mount:" not in done.stderr and "unshare:" not in done.stderr:
            break
    else:
        pytest.skip(f"cannot mount a read-only tmpfs in a mount namespace: {done.stderr!r}")
    out = done.stdout + done.stderr
    line = refused_at_parse(subprocess.CompletedProcess(command, done.returncode, out))
    assert line == (
        f"config key `store`: store {store} is on a read-only file system: mount it "
        "read-write, or give a store folder on a writable one"
    ), line
    assert not (tmp_path / "w" / "logs").exists(), "no job ran"
