"""Values typed on `snakemake --config`, as a user types them (soma.config.configs.typed): the
workflow runs with the config the same values in a file give, records the same run, and
shows a value it refuses quoted with its type. Real dry runs of the Snakefile."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers import ROOT, TESTS, TINY, ok, snakemake

# every process a test starts applies SOMA_MUTANT too (tests/inherited/sitecustomize.py)
INHERITED = TESTS / "inherited"


def env() -> dict[str, str]:
    path = [str(INHERITED), str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p), OMP_NUM_THREADS="1")


def config_digest(out: str) -> str:
    """Snakemake's MD5 of the workflow's whole config, after the Snakefile read it (its
    header's `Config MD5`): two runs with the same digest run with the same config."""
    found = re.search(r"Config MD5: ([0-9a-f]{32})\b", out)
    assert found is not None, out[-3000:]
    return found.group(1)


def plan(out: str) -> dict[str, str]:
    """A dry run's job counts by rule."""
    return dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.MULTILINE))


def extra(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "extra.yaml"
    path.write_text(text)
    return path


# The values (#37) and README's spellings: on the command line, and in a file.
SAME = {
    "tracking": (["tracking=true"], "tracking: true\n"),
    "study": (
        ["study={strategy: [fedavg, fedadam], seed: [0, 1]}"],
        "study: {strategy: [fedavg, fedadam], seed: [0, 1]}\n",
    ),
    "task options": (
        ["task_options={soma.tasks.digits: {model: mlp, hidden: 0x10, scale: unit}}"],
        "task_options:\n  soma.tasks.digits: {model: mlp, hidden: 0x10, scale: unit}\n",
    ),
}


@pytest.mark.workflow
@pytest.mark.parametrize("case", list(SAME))
def test_a_value_typed_on_the_command_line_runs_the_config_a_file_gives(tmp_path, case) -> None:
    args, text = SAME[case]
    typed = ok(snakemake(tmp_path / "typed", "-n", "--config", *args, env=env()))
    filed = ok(snakemake(tmp_path / "filed", "-n", config=[TINY, extra(tmp_path, text)], env=env()))
    assert config_digest(typed) == config_digest(filed)
    assert plan(typed) == plan(filed)
    if case == "study":  # four runs, named by their seeds, 0 and 1
        for run in ("tiny_strategy-fedavg_seed-0", "tiny_strategy-fedadam_seed-1"):
            assert f"results/{run}/" in typed, typed[-3000:]


@pytest.mark.workflow
def test_a_nested_option_typed_on_the_command_line_is_the_run_a_file_recorded(tmp_path) -> None:
    """The file's run recorded by its `start` job (results/tiny/run.json); the same options
    typed on the command line (`lr: 1e-1` is text in a file, a float typed: one run) neither
    rerun the start (its params, the run's identity, are the same) nor are refused; another
    value is refused naming the key."""
    work = tmp_path / "run"
    text = "task_options:\n  soma.tasks.digits: {model: mlp, hidden: 0x10, lr: 1e-1}\n"
    ok(
        snakemake(
            work,
            "--cores",
            "1",
            "results/tiny/run.json",
            config=[TINY, extra(tmp_path, text)],
            env=env(),
        )
    )
    recorded = json.loads((work / "results" / "tiny" / "run.json").read_text())["declared"]
    options = recorded["task_options"]
    assert (options["model"], options["hidden"], options["lr"]) == ("mlp", 16, 0.1)
    typed = "task_options={soma.tasks.digits: {model: mlp, hidden: 0x10, lr: 1e-1}}"
    same = ok(snakemake(work, "-n", "--config", typed, env=env()))
    assert "rule start:" not in same and plan(same)["train"] == "4", same[-3000:]
    other = snakemake(work, "-n", "--config", typed.replace("0x10", "0x11"), env=env())
    assert other.returncode != 0
    assert "`task_options.hidden` 16 there, 17 here" in other.stdout, other.stdout[-3000:]


@pytest.mark.workflow
def test_a_refused_value_typed_on_the_command_line_is_shown_quoted_with_its_type(
    tmp_path,
) -> None:
    for args, said in (
        (["tracking=1"], "config key `tracking`: '1' (an integer) is not of type 'boolean'"),
        (
            ["study={seed: ['0', 1]}"],  # quoted: text, as in a file
            "config key `seed` must be an integer >= 0, not '0' (text)",
        ),
    ):
        result = snakemake(tmp_path, "-n", "--config", *args, env=env())
        assert result.returncode != 0, args
        assert said in result.stdout, (args, result.stdout[-3000:])
        assert not (tmp_path / "results").exists() and not (tmp_path / "store").exists()
