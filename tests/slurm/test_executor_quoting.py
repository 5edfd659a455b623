"""Config values never reach a shell unquoted under `--executor soma-slurm` (issue 52): a
real Snakemake submits one job, without a cluster, to a fake `sbatch` on PATH that keeps its
arguments and its stdin; the `--wrap` it was handed (or the script, with
`--soma-slurm-pass-command-as-script`) is then run as Slurm runs it (`sh`; and `bash`), with a
fake `srun` on PATH that keeps its own. Neither the submission shell nor the job's shell runs
a `$(...)` in a value, and the job's Snakemake is handed each value as it was given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fake_commands

WORKER = Path(__file__).with_name("submit_worker.py")
# the values as given to `--config`, each one argument (a `$(...)` would make PWNED)
CONFIG = ["payload=a$(touch PWNED)b", "quote=it's", "both=it's $(touch PWNED) `touch PWNED` \\"]
FAKES = {
    "sbatch": 'for a in "$@"; do printf "%s\\0" "$a"; done > "$FAKE_LOG/sbatch"\n'
    'cat > "$FAKE_LOG/stdin"\necho "sbatch: error: a fake sbatch submits nothing" >&2\nexit 1\n',
    "srun": 'for a in "$@"; do printf "%s\\0" "$a"; done > "$FAKE_LOG/srun"\n',
}
SNAKEFILE = 'rule all:\n    output: "out.txt"\n    shell: "touch {output}"\n'


def fake_path(tmp_path: Path) -> dict[str, str]:
    """An environment with sbatch and srun (and the other Slurm commands: silent) faked."""
    names = ("sbatch", "srun", "sacct", "squeue", "sinfo", "scontrol", "sacctmgr", "sshare")
    path = fake_commands(tmp_path / "bin", {name: FAKES.get(name, "exit 0") for name in names})
    logs = tmp_path / "log"
    logs.mkdir()
    return dict(os.environ, PATH=path, FAKE_LOG=str(logs))


def arguments(log: Path) -> list[str]:
    return log.read_text().split("\0")[:-1]


def submitted(tmp_path: Path, env: dict[str, str], *options: str) -> str:
    """What a real `snakemake --executor soma-slurm --config ...` handed sbatch to run: its
    `--wrap`, or the script on its stdin (`/dev/stdin`)."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE)
    resources = ["slurm_account=a", "slurm_partition=p", "runtime=5", "mem_mb=100"]
    command = [sys.executable, str(WORKER), "--executor", "soma-slurm", "--jobs", "1"]
    command += ["--default-resources", *resources, *options, "--config", *CONFIG]
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
    assert done.returncode != 0, done.stderr[-3000:]  # the fake sbatch refused it
    assert "a fake sbatch submits nothing" in done.stderr, done.stderr[-3000:]
    assert not list(tmp_path.rglob("PWNED")), "the submission shell ran a config value"
    given = arguments(Path(env["FAKE_LOG"]) / "sbatch")
    wraps = [a.removeprefix("--wrap=") for a in given if a.startswith("--wrap=")]
    if given[-1] == "/dev/stdin":
        assert not wraps, given
        return (Path(env["FAKE_LOG"]) / "stdin").read_text()
    assert len(wraps) == 1, given
    return wraps[0]


def config_of(srun: list[str]) -> list[str]:
    """The values after the last `--config` the job's Snakemake is handed, up to an option."""
    at = len(srun) - srun[::-1].index("--config")
    values = []
    for argument in srun[at:]:
        if argument.startswith("--"):
            break
        values.append(argument)
    return values


@pytest.mark.parametrize(
    "shell, options",
    [("sh", []), ("bash", []), ("sh", ["--soma-slurm-pass-command-as-script"])],
    ids=["wrap-sh", "wrap-bash", "script"],
)
def test_a_config_value_reaches_the_job_as_given_and_no_shell_runs_it(
    tmp_path, shell, options
) -> None:
    env = fake_path(tmp_path)
    job = submitted(tmp_path, env, *options)
    (tmp_path / "job").mkdir()
    ran = subprocess.run([shell, "-c", job], cwd=tmp_path / "job", env=env, capture_output=True)
    assert (Path(env["FAKE_LOG"]) / "srun").is_file(), ran.stderr  # (its marker's folder is gone)
    assert not list(tmp_path.rglob("PWNED")), f"the job's shell ran a config value: {job}"
    srun = arguments(Path(env["FAKE_LOG"]) / "srun")
    assert "-m" in srun and "snakemake" in srun, srun
    assert config_of(srun) == CONFIG, srun
