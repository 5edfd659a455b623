"""What many test files share: the checkout's paths, the snakemake runner, the soma CLI
runner, and reading what a run left behind. One place, so that a change to how a test runs
snakemake or soma is made once."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Protocol

import forking

from soma.store import Store

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
SNAKEFILE = ROOT / "Snakefile"
TINY = FIXTURES / "tiny.yaml"
NO_BASELINES = FIXTURES / "no-baselines.yaml"

# The one bound on waiting for another process or thread, for a hang only: a test waits for an
# event it can observe (a line printed, a name bound, a process exited) and fails at once when
# the process it waits on has died; this bound is reached only by a hang, however loaded the
# machine (an `import torch` took 90 s at load 40). SOMA_TEST_HANG overrides it.
HANG = float(os.environ.get("SOMA_TEST_HANG", "1800"))


def fake_commands(folder: Path, scripts: dict[str, str]) -> str:
    """Each of `scripts` (a command's name -> its body, run by /bin/sh) as an executable in
    `folder` (made if missing), and PATH with `folder` first: what a test that fakes Slurm's
    commands puts in the environment."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        script = folder / name
        script.write_text(f"#!/bin/sh\n{body.rstrip()}\n")
        script.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def snakemake_arguments(
    workdir: Path, *args: str, config: list[Path] | tuple[Path, ...] | None = (TINY,)
) -> list[str]:
    """snakemake's arguments for the checkout's Snakefile run in `workdir`."""
    arguments = ["-s", str(SNAKEFILE), "-d", str(workdir)]
    if config:
        arguments += ["--configfile", *map(str, config)]
    return arguments + list(args)


def snakemake_command(
    workdir: Path, *args: str, config: list[Path] | tuple[Path, ...] | None = (TINY,)
) -> list[str]:
    return [sys.executable, "-m", "snakemake", *snakemake_arguments(workdir, *args, config=config)]


def snakemake(
    workdir: Path,
    *args: str,
    config: list[Path] | tuple[Path, ...] | None = (TINY,),
    timeout: float = 600,
    env: dict | None = None,
    umask: int = -1,
) -> subprocess.CompletedProcess:
    """Run snakemake in `workdir` (under `umask`, as `subprocess.run` has it: -1 the
    caller's); killed as a whole process group if it outlives `timeout`.
    Forked from the suite's fork server (tests/forking.py), which imported snakemake once,
    unless the test's environment changes how the interpreter starts (`forking.serves`) or
    it runs under a mutant: a process started fresh then, whose interpreter reads that
    environment from its start (PYTHONPATH's sitecustomize, which applies the mutant) as a
    user's would."""
    process = snakemake_process(workdir, *args, config=config, env=env, umask=umask)
    return forking.finished(process, "snakemake", timeout)


def snakemake_process(
    workdir: Path,
    *args: str,
    config: list[Path] | tuple[Path, ...] | None = (TINY,),
    env: dict | None = None,
    umask: int = -1,
) -> Running:
    """snakemake in `workdir`, started and left running (a test that races two, or kills
    one): its output (stdout and stderr in the order written) is what `communicate()`
    returns first. Forked or fresh as `snakemake` is; its own process group, which its
    `kill()` ends whole."""
    if forking.serves(env):
        arguments = snakemake_arguments(workdir, *args, config=config)
        mask = None if umask < 0 else umask
        return forking.Forked("snakemake", arguments, apart=False, env=env, umask=mask)
    return _Group(
        snakemake_command(workdir, *args, config=config),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
        umask=umask,
    )


class _Group(subprocess.Popen):
    """A Popen whose `kill()` ends its whole process group, as `forking.Forked`'s does."""

    def kill(self) -> None:
        forking.kill_group(self)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-4000:]
    return result.stdout


def receipts(workdir: Path, run: str = "tiny") -> dict[str, bytes]:
    base = workdir / "results" / run
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*.json"))}


def averagings_per_round(store: Path, run: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for name in Store(store).bound(f"{run}/round/"):
        if "/computed/" in name:
            r = int(name.split("/")[2])
            counts[r] = counts.get(r, 0) + 1
    return counts


def soma_clients(store: Path, run: str, *flags: str, clients: int = 2, rounds: int = 2) -> list:
    """`soma client` for each client of tiny.yaml's task, a process each (`soma_processes`);
    each one's per-round lines."""
    args = ["client", "--store", str(store), "--run", run, "--rounds", str(rounds)]
    args += ["--clients", str(clients), "--task", "soma.tasks.digits"]
    for option in ("labels_per_client=5", "model=softmax", "epochs=1"):  # tiny.yaml's
        args += ["--option", option]
    return soma_processes([*args, *flags], [str(k) for k in range(clients)])


def averaged_weights(workdir: Path, run: str, rounds: int = 2) -> list[str]:
    base = workdir / "results" / run / "round"
    return [
        json.loads((base / str(r) / "average.json").read_text())["weights"] for r in range(rounds)
    ]


def soma(
    *args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`soma ARGS...` as a user types it (this interpreter's soma), its output captured.
    Forked from the suite's fork server (tests/forking.py), which imported torch and soma
    once, unless the test's environment changes how the interpreter starts or it runs under
    a mutant, as `snakemake`."""
    if forking.serves(env):
        return forking.soma(list(args), cwd=cwd, timeout=timeout, env=env)
    return subprocess.run(
        [sys.executable, "-m", "soma.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def soma_process(args: list[str], *, cwd: Path, env: dict | None = None) -> Running:
    """`soma ARGS` started and left running (stdout and stderr apart), forked as `soma` is."""
    if forking.serves(env):
        return forking.Forked("soma", args, cwd, env=env)
    return subprocess.Popen(
        [sys.executable, "-m", "soma.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def refused(result: subprocess.CompletedProcess) -> str:
    """The one `soma: ...` line a refusal prints (and no traceback)."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("soma: "), result.stderr
    return lines[0]


def soma_processes(
    args: list[str], groups: list[str], timeout: float = 300, *, every_line: bool = False
) -> list[list[dict]]:
    """`soma ARGS --mine GROUP` once per group, all at once (with the test's mutant, if any:
    tests/round_worker.py), as srun starts its tasks; each process's JSON lines that say a
    round (`every_line`: and its last, which says the run is done). Forked from the suite's
    fork server (tests/forking.py) but under a mutant, as `soma`: they still race, each a
    process of its own."""
    if forking.serves():
        running = [forking.Forked("soma", [*args, "--mine", mine]) for mine in groups]
    else:
        command = [sys.executable, str(TESTS / "round_worker.py"), *args]
        running = [
            subprocess.Popen(
                [*command, "--mine", mine],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for mine in groups
        ]
    lines = []
    for out in finished_together(running, timeout):
        said = [json.loads(line) for line in out.splitlines()]
        lines.append(said if every_line else [line for line in said if "round" in line])
    return lines


class Running(Protocol):
    """What `communicated` asks of a process it waits on: a `subprocess.Popen`'s, or a
    `forking.Forked`'s (text output)."""

    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...

    def communicate(self) -> tuple[str, str]: ...


def communicated(
    running: list[Running], timeout: float, *, fail_fast: bool = False
) -> list[tuple[str, str]]:
    """Each process's (stdout, stderr), read from all of them at once: reading one process's
    pipes to its end first leaves the others blocked writing to theirs once a pipe's buffer
    (64 KiB) is full, each waiting on the other. A timeout (or, with `fail_fast`, the first
    process to exit non-zero) kills them all and fails the test with every process's stderr:
    a process that dies early otherwise leaves the others waiting for it at the barrier."""
    import threading
    import time

    said: dict[int, tuple[str, str]] = {}

    def read(k: int, process: subprocess.Popen) -> None:
        said[k] = process.communicate()

    readers = [
        threading.Thread(target=read, args=(k, p), daemon=True) for k, p in enumerate(running)
    ]
    for reader in readers:
        reader.start()
    timeout = max(timeout, HANG)  # the caller's is a floor: a loaded machine is not a hang
    deadline = time.monotonic() + timeout
    while any(reader.is_alive() for reader in readers):
        failed = [p for p in running if fail_fast and p.poll() not in (None, 0)]
        if failed or time.monotonic() > deadline:
            for process in running:
                process.kill()
            for reader in readers:
                reader.join()
            why = f"exit {failed[0].returncode}" if failed else f"outlived {timeout} s"
            tails = [(said[k][1] or said[k][0] or "")[-3000:] for k in range(len(running))]
            errors = "\n".join(
                f"--- process {k} (exit {p.returncode}):\n{tails[k]}" for k, p in enumerate(running)
            )
            raise AssertionError(f"a process failed ({why}):\n{errors}")
        time.sleep(0.1)
    return [said[k] for k in range(len(running))]


def finished_together(running: list[Running], timeout: float) -> list[str]:
    """Each process's stdout once all exit 0 (`communicated`, the first to fail stopping all)."""
    return [out for out, _ in communicated(running, timeout, fail_fast=True)]


def same_weights(a: dict, b: dict) -> bool:
    """Two exports with the same nodes, keys and tensors, bit for bit."""
    import torch

    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


def blob_files(store: Store) -> list[Path]:
    """The blob files of a folder store, sorted."""
    return sorted(p for p in (store.directory / "blobs").rglob("*") if p.is_file())


def temporaries(store: Store) -> list[str]:
    """What a folder store's tmp/ holds: writes under way, or left by a killed writer."""
    return sorted(os.listdir(store.directory / "tmp"))


def same(a: object, b: object, where: str = "value") -> None:
    """Exactly the same value: the same types all the way down, tensors bit for bit."""
    import torch

    assert type(a) is type(b) or (isinstance(a, torch.Tensor) and type(b) is torch.Tensor), (
        f"{where}: {type(a)} != {type(b)}"
    )
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a.dtype}{list(a.shape)}"
        bits = a.detach().contiguous().reshape(-1).view(torch.uint8)
        assert torch.equal(bits, b.contiguous().reshape(-1).view(torch.uint8)), where
    elif isinstance(a, dict):
        assert sorted(a) == sorted(b), where
        for key in a:
            same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert repr(a) == repr(b), f"{where}: {a!r} != {b!r}"  # nan, -0.0 and all
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def overlapping_export(store: Store) -> str:
    """An export whose tensor file says two tensors share bytes: it hashes right (it was put
    as bytes), so only its header is wrong, as a record written by hand may be."""
    import struct

    from soma.store import codecs

    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    }
    raw = json.dumps(header).encode()
    blob = store.put(struct.pack("<Q", len(raw)) + raw + bytes(8))
    return store.put(codecs.record_bytes({"fc": {"$tensors": blob}}, None))


def soma_env() -> dict[str, str]:
    """Every mode imports soma from this tree and the fixture tasks from tests/fixtures,
    one torch thread, and no Slurm task of the test's own (`soma client` would read it)."""
    environ = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{FIXTURES}", OMP_NUM_THREADS="1")
    environ.pop("SLURM_PROCID", None)
    return environ


def last_weights(out: str) -> str:
    """The digest of the last average's weights a `soma client` or `soma simulate` printed."""
    return [json.loads(line) for line in out.splitlines() if '"round"' in line][-1]["weights"]


def same_bits_in_every_mode(
    tmp_path: Path,
    run: list[str],
    workflow: list[str],
    *,
    name: str,
    mines: tuple[str, ...] = ("0", "1"),
    configs: tuple[Path, ...] = (TINY, NO_BASELINES),
    workdir: Path | None = None,
    target: str = "round/{last}/evaluation.json",
) -> tuple[str, Path]:
    """The same run three ways, its last average's weights the same bits in each: `soma
    client` processes racing (one per `mines`, as srun starts them), `soma simulate` (every
    client in one process, a temporary store), and the workflow (`configs` with
    `--config run=<name> <workflow>...`, in `workdir`: tmp_path/workflow by default). `run`
    is the CLI's flags of the run (--rounds first). The digest and the workflow's results.

    The workflow runs up to `target` under results/<name>/ ({last}: the last round), by
    default the last round's evaluation: the task is trained, averaged and evaluated in the
    workflow, and the run's summary, model and best (read by no caller; run by the tiny run,
    tests/tiny_run.py) are not made, 3 jobs and their imports of torch fewer."""
    # a run of its own in tmp_path/store: a workflow run in tmp_path shares that store
    client = ["client", "--store", "store", "--run", f"{name}-clients", *run]
    processes = [soma_process([*client, "--mine", mine], cwd=tmp_path, env=soma_env())
                 for mine in mines]  # fmt: skip
    by_client = {last_weights(out) for out in finished_together(processes, 600)}
    assert len(by_client) == 1, by_client
    simulated = soma("simulate", *run, cwd=tmp_path, env=soma_env())
    assert simulated.returncode == 0, simulated.stderr
    assert {last_weights(simulated.stdout)} == by_client
    workdir = workdir or tmp_path / "workflow"
    workdir.mkdir(exist_ok=True)
    rounds = int(run[run.index("--rounds") + 1])
    # the target between --cores and --config: --configfile and --config take every
    # argument up to the next option
    made = f"results/{name}/" + target.format(last=rounds - 1)
    arguments = ["--cores", "1", made, "--config", f"run={name}", *workflow]
    done = snakemake(workdir, *arguments, config=configs, env=soma_env(), timeout=900)
    assert done.returncode == 0, done.stdout[-4000:]
    results = workdir / "results" / name
    average = json.loads((results / "round" / str(rounds - 1) / "average.json").read_text())
    assert {average["weights"]} == by_client
    return average["weights"], results


# The digits clients the fault tests run (tests/run/test_faults.py, test_fault_deadline.py):
# 4 of them, a quorum of 3, FedAdam, a small softmax model.
FAULT_RUN = ["--clients", "4", "--task", "soma.tasks.digits", "--quorum", "3"]
FAULT_RUN += ["--strategy", "fedadam"]
for _option in ("labels_per_client=5", "model=softmax", "epochs=1"):
    FAULT_RUN += ["--option", _option]


def fault_clients(args: list[str], *, plant: str | None, faulty: int, env=None) -> list:
    """`tests/fault_worker.py ARGS --mine k` for each of the 4 clients, all at once, with
    `plant` (SOMA_PLANT) in client `faulty`'s process only and `env(k)` beside each one's
    environment; each one's return code, stdout and stderr."""
    running = []
    for k in range(4):
        mine = dict(os.environ, OMP_NUM_THREADS="1", **(env(k) if env else {}))
        mine.pop("SOMA_PLANT", None)
        if plant is not None and k == faulty:
            mine["SOMA_PLANT"] = plant
        command = [str(TESTS / "fault_worker.py"), *args, "--mine", str(k)]
        if forking.serves(mine):  # what `env` and the plant set is read after the start
            running.append(forking.Forked("python", command, env=mine))
        else:
            running.append(
                subprocess.Popen(
                    [sys.executable, *command],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=mine,
                )
            )
    done = []
    for process in running:
        out, err = process.communicate(timeout=HANG)
        done.append((process.returncode, out, err))
    return done


def correlated(a, b, *, floor: float = 0.5, sigmas: float = 6.0) -> float | None:
    """Pearson's r of two same-sized float arrays when it says they are related, else None.

    A masked array is independent of the export it hides, and then r is noise of spread about
    1/sqrt(n): a fixed bar of |r| > 0.5 is crossed by chance once in a few thousand runs at
    n = 64 (CI met r = -0.541). So the bar is |r| > `floor` and more than `sigmas` standard
    deviations of Fisher's z (atanh(r) * sqrt(n - 3)) from zero: at 6, a false alarm is about
    2e-9 per comparison, while a leak (r near 1) is still seen at any size from 32 on."""
    import numpy as np

    n = a.size
    if n < 32 or a.std() == 0 or b.std() == 0:
        return None
    r = float(np.corrcoef(a, b)[0, 1])
    bar = max(floor, math.tanh(sigmas / math.sqrt(n - 3)))
    return r if abs(r) > bar else None
