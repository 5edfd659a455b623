"""`snakemake -n` refuses a task or strategy that names no module at parse time, in one line
naming the config key (soma.config.lookup), before any job: a typo is not met minutes later
at the end of a start job's traceback."""

from __future__ import annotations

import pytest
from helpers import snakemake


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("task=nosuchtask", "config key `task`: no module 'nosuchtask' can be imported here"),
        ("strategy=fedadma", "did you mean 'fedadam'?"),
    ],
)
def test_a_dry_run_refuses_a_name_no_module_has(tmp_path, typed: str, said: str) -> None:
    result = snakemake(tmp_path, "-n", "--config", typed)
    assert result.returncode != 0
    lines = [line for line in result.stdout.splitlines() if said in line]
    assert len(lines) == 1, result.stdout[-3000:]
    assert not (tmp_path / "results").exists() and not (tmp_path / "store").exists()
