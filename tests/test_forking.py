"""The suite's fork server (tests/forking.py): a snakemake forked from it is the run a fresh
`python -m snakemake` would be: the caller's environment and working directory at the call,
its exit status and its output; a forked soma says what a fresh one says; the workflow jobs
that snakemake forks from its job server run as `python SCRIPT` would, fail as it would, and
end with their snakemake."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import forking
import pytest
from helpers import HANG


def test_a_forked_snakemake_runs_with_the_callers_environment_and_folder(tmp_path, monkeypatch):
    forking.context()  # the server first: what is set after it must still reach the run
    monkeypatch.setenv("SOMA_FORKING_PROBE", "set after the server started")
    (tmp_path / "Snakefile").write_text(
        "import os\n"
        "rule probe:\n"
        "    output: 'probe.txt'\n"
        "    run:\n"
        "        with open(output[0], 'w') as f:\n"
        "            f.write(os.environ['SOMA_FORKING_PROBE'] + '|' + os.getcwd())\n"
    )
    done = forking.snakemake(["--cores", "1"], cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout
    assert "1 of 1 steps (100%) done" in done.stdout
    assert (tmp_path / "probe.txt").read_text() == f"set after the server started|{tmp_path}"


def test_a_forked_snakemake_that_fails_says_why_and_exits_1(tmp_path):
    (tmp_path / "Snakefile").write_text("rule broken:\n    output: 'x'\n    shell: 'exit 3'\n")
    done = forking.snakemake(["--cores", "1"], cwd=tmp_path, timeout=600)
    assert done.returncode == 1
    assert "Error in rule broken" in done.stdout


@pytest.mark.parametrize("args", [["--help"], ["bogus"], ["status", "--store", "nowhere"]])
def test_a_forked_soma_says_what_a_fresh_one_says(tmp_path, args):
    forked = forking.soma(args, cwd=tmp_path, timeout=600)
    fresh = subprocess.run(
        [sys.executable, "-m", "soma.cli", *args], cwd=tmp_path, capture_output=True, text=True
    )
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )


def test_forked_processes_at_once_each_say_their_own_and_end_with_their_own_status(tmp_path):
    running = [forking.Forked("soma", args, tmp_path) for args in (["--help"], ["bogus"])]
    said = [process.communicate() for process in running]
    assert [process.returncode for process in running] == [0, 2]
    assert [process.poll() for process in running] == [0, 2]
    assert said[0][0].startswith("usage: soma") and said[0][1] == ""
    assert said[1][0] == "" and "invalid choice: 'bogus'" in said[1][1]
    running[0].kill()  # ended: nothing to kill, and no error
    assert running[0].communicate() == said[0]


def _workflow(folder, script: str) -> None:
    """A one-rule workflow in `folder` whose job is `script`, a `script:` file as the
    workflow's own rules have them."""
    (folder / "job.py").write_text(script)
    (folder / "Snakefile").write_text(
        "rule job:\n    output: 'done.txt'\n    log: 'job.log'\n    script: 'job.py'\n"
    )


def test_a_workflow_job_is_forked_and_runs_as_python_script_would(tmp_path, monkeypatch):
    forking.context()
    monkeypatch.setenv("SOMA_FORKING_PROBE", "the caller's")
    _workflow(
        tmp_path,
        "import json, os, sys\n"
        "forked = 'torch' in sys.modules  # imported before the script: the server's\n"
        "print('said by the job')\n"
        "with open(snakemake.output[0], 'w') as f:\n"
        "    json.dump([forked, __name__, sys.argv, sys.path[0], os.getcwd(),\n"
        "               os.environ['SOMA_FORKING_PROBE'], os.getpid()], f)\n",
    )
    done = forking.snakemake(["--cores", "1"], cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout
    assert "said by the job" in done.stdout
    forked, name, argv, first, cwd, probe, pid = json.loads((tmp_path / "done.txt").read_text())
    assert forked and name == "__main__" and probe == "the caller's"
    assert len(argv) == 1 and argv[0].endswith(".py") and first == os.path.dirname(argv[0])
    assert cwd == str(tmp_path)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # ended with the run


def test_a_failing_workflow_job_fails_its_rule_with_its_traceback(tmp_path):
    _workflow(tmp_path, "raise RuntimeError('the job broke')\n")
    done = forking.snakemake(["--cores", "1"], cwd=tmp_path, timeout=600)
    assert done.returncode == 1
    assert "RuntimeError: the job broke" in done.stdout
    assert "Error in rule job" in done.stdout


def test_killing_a_forked_snakemake_kills_its_running_job(tmp_path):
    _workflow(
        tmp_path,
        "import os, time\n"
        "open('pid.tmp', 'w').write(str(os.getpid()))\n"
        "os.rename('pid.tmp', 'pid')\n"
        "time.sleep(3600)\n",
    )
    process = forking.Forked("snakemake", ["--cores", "1"], tmp_path, apart=False)
    try:
        pid_file = tmp_path / "pid"
        deadline = time.monotonic() + HANG  # a hang's bound, not a wait's: the job writes it
        while not pid_file.exists() and process.poll() is None:
            assert time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        assert pid_file.exists(), process.communicate()[0]
        job = int(pid_file.read_text())
    finally:
        process.kill()
        process.communicate()
    deadline = time.monotonic() + HANG  # SIGKILL ends it at once: a hang's bound
    while os.path.exists(f"/proc/{job}") and _state(job) != "Z":
        assert time.monotonic() < deadline, f"job {job} outlived its snakemake"
        time.sleep(0.05)


def _state(pid: int) -> str:
    """A process's state letter (Z: ended, not yet reaped), '' if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


@pytest.mark.parametrize("umask", [0o027, None])
def test_a_forked_snakemake_and_its_jobs_run_under_the_callers_umask(tmp_path, umask):
    (tmp_path / "job.py").write_text(
        "import os\nopen(snakemake.output[0], 'w').write(oct(os.umask(0)))\n"
    )
    (tmp_path / "Snakefile").write_text(
        "import os\n"
        "rule all:\n    input: 'job.txt', 'run.txt'\n"
        "rule job:\n    output: 'job.txt'\n    script: 'job.py'\n"
        "rule run:\n    output: 'run.txt'\n    run:\n"
        "        open(output[0], 'w').write(oct(os.umask(0)))\n"
    )
    done = forking.snakemake(["--cores", "1"], cwd=tmp_path, timeout=600, umask=umask)
    assert done.returncode == 0, done.stdout
    expected = oct(0o027 if umask is not None else forking._umask())
    assert [(tmp_path / f).read_text() for f in ("job.txt", "run.txt")] == [expected] * 2


def test_an_environment_that_only_adds_module_folders_is_forked_and_finds_them(tmp_path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "probe_module.py").write_text("SAID = 'found on the added path'\n")
    (tmp_path / "probe.py").write_text("import probe_module\nprint(probe_module.SAID)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "mods"))
    assert forking.serves(env)
    process = forking.Forked("python", [str(tmp_path / "probe.py")], tmp_path, env=env)
    assert process.communicate() == ("found on the added path\n", "")
    assert process.returncode == 0


def test_an_environment_that_changes_how_python_starts_is_not_forked(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("")
    for env in (
        dict(os.environ, PYTHONPATH=str(tmp_path)),  # a sitecustomize: a mutant, fake Slurm
        dict(os.environ, PYTHONHASHSEED="7"),
    ):
        assert not forking.serves(env)
        with pytest.raises(ValueError, match="a fresh interpreter"):
            forking.Forked("soma", ["--help"], tmp_path, env=env)
