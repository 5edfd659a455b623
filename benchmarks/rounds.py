"""What a federated round costs as processes, jobs and files, against one Python loop.

    python benchmarks/rounds.py            # 50 rounds, a 5-round workflow, 1,000 and 10,000
                                           # clients, 64 exports of 16 MiB
    python benchmarks/rounds.py --quick    # 10 rounds, a 3-round workflow, 1,000 clients,
                                           # 16 exports of 16 MiB
    python benchmarks/rounds.py --only memory [--quick]   # section 7 and its target alone

soma's rounds meet in a shared folder: every client is a process (or a job) that imports
torch, trains, writes its export to the store and polls for the average. This measures what
that costs beyond the arithmetic, against "the floor": one Python process that trains all
the clients each round and averages them with `soma.fedavg`, nothing written, nothing
polled (a plain loop in `floor_child`, no store: the baseline of every other row). Everything is
measured in the same run, on the digits task with its defaults (10 clients holding two
digits each, 2 local epochs), every child with one torch thread (SOMA_THREADS=1,
OMP_NUM_THREADS=1):

1. the floor, for --rounds R rounds (wall time of the whole process, imports included, and
   per round); and `python -c 'import torch'` (median of 3), the least any process pays;
2. `soma client`, one process per client: 10 processes started together, wall time until
   the last one exits;
3. `soma client` hosting several clients per process (`--mine 0-4`, `--mine 5-9`; and one
   process, `--mine 0-9`);
4. the Snakemake workflow on the local executor (--cores 2) for --workflow-rounds rounds,
   with a train job per client (`clients_per_job=1`) and one job per round (rule `round`,
   which trains and averages: `clients_per_job=10`): wall time, the steady time per round
   (between the first and the last round's average receipt), and the per-job overhead
   beyond importing torch: the median of every job's Snakemake benchmark seconds
   (logs/<run>/benchmark/**/*.tsv) less the import-torch floor, and the same for the train
   jobs alone;
5. peak memory: the max RSS of every process, read from `os.wait4` (the kernel's
   ru_maxrss of the child), and for workflow jobs from their benchmark files;
6. one round of 1,000 and 10,000 clients (the control task with 8 examples and 1 epoch per
   client) over 2 `soma client` processes averaging through the tree (`--tree 32`), and the
   flat average of the same 1,000 clients; against the same N trained and averaged in one
   process (`soma.fedavg` over an iterator: one model at a time). "averaging" is the time
   from the last client's contribution until both processes hold the average; its parts,
   the largest over the processes, are the inputs' check, the tree's nodes, and the final
   averaging. Memory is the largest max RSS, above a process that only imports torch and
   soma's modules (the baseline RSS), in bytes of one model; and `snakemake -n` of a
   1,000-client, 10-round DAG with 50 and with 1 client per train job. The control model
   is ~1 KB, so these RSS figures are the interpreter's and the run's bookkeeping, not
   models; what grows per client is reported as MiB per 1,000 clients (between the 1,000-
   and the 10,000-client tree rows: the full run only);
7. memory per process with a model big enough to see: --memory-clients N exports (64; 16
   with --quick) of one float32 node of 4M floats (16 MiB), random and different per
   client, kept in a temporary store by a helper process beforehand (`store.put_value`),
   then, each in fresh processes: (a) `soma.round.tree.reduce(store, "mem", leaves, fan_in=8)`
   by 2 processes at once sharing the work; (b) one process folding the flat
   `soma.fedavg` over an iterator of (`store.recall_digest(d, lazy=True)`, size); (c) one
   process recalling all N eagerly, then `soma.fedavg` (the naive way, ~N models). Each
   process's peak above a baseline process that only does the same imports (torch,
   soma.store, soma.round.tree, soma.aggregate, soma.round.holders; the smaller of 2 runs), in
   MiB and
   in models: max RSS (ru_maxrss, which counts the lazily recalled blobs' file-backed mmap
   pages while they are mapped and touched), and anonymous memory (RssAnon of
   /proc/<pid>/status, sampled by the parent every 20 ms: a sampled peak, which can miss a
   spike shorter than that). Wall time includes imports; "work" is the averaging alone.
   Anonymous memory includes what malloc keeps after a free: glibc raises its mmap
   threshold after freeing the first 16 MiB block, so a process that folds several nodes
   can show a second model's worth of freed heap (with MALLOC_MMAP_THRESHOLD_=131072 in
   the environment it does not).

Each table gives ratios to its floor; a "targets" section at the end says which of the
issue's targets are met. The memory target ("hierarchical aggregation of 10,000 clients
with every process under 3x one model's memory") is judged on section 7's row (a): each
tree process's anonymous memory above the baseline, in models, under 3. The tree holds one
running mean and one input at a time whatever N, so 64 clients of 16 MiB show what 10,000
would (10,000 x 16 MiB would not fit the disk); what does grow with N is bookkeeping,
which the 10,000-client row of section 6 measures (it must complete; its MiB per 1,000
clients is reported, and projected onto the 16 MiB model). Wall times include the
processes' start and imports, on purpose: that is what a round of processes pays. The
machine's load is printed with the header; timings from a loaded machine are longer,
ratios less so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SNAKEFILE = REPO / "Snakefile"
CLIENTS = 10
DIGITS = "soma.tasks.digits"
CONTROL = "soma.tasks.control"
CONTROL_OPTIONS = {"examples": 8, "epochs": 1}
FAN_IN = 32
DAG_CLIENTS, DAG_ROUNDS = 1000, 10
MIB = 1024 * 1024
BASELINE_IMPORTS = (
    "import torch, soma, soma.cli, soma.round, soma.store, soma.round.tree, soma.tasks"
)
# Section 7: exports of one float32 node of 4M floats (16 MiB), averaged through a tree of
# fan-in 8 by 2 processes, flat, and naively; memory sampled from /proc every 20 ms.
MEMORY_FLOATS = 4 << 20
MEMORY_MODEL = MEMORY_FLOATS * 4
MEMORY_FAN_IN = 8
SAMPLE_EVERY = 0.02

# The targets.
CLIENT_RATIO_TARGET = 2.0  # 2 soma client processes, at most this x the floor's wall time
ROUND_ABOVE_TARGET = 3.0  # workflow, one train job per round: seconds a round above the floor
JOB_OVERHEAD_TARGET = 0.5  # seconds per job beyond `import torch`
MODEL_MEMORY_TARGET = 3.0  # every process's RSS above the baseline, in models
DAG_TARGET = 30.0  # seconds of `snakemake -n`


# --- Children: started together, reaped with their rusage ---------------------------------


class ChildFailed(RuntimeError):
    """A measured process exited non-zero; the message ends with its stderr."""


@dataclass
class Finished:
    name: str
    seconds: float  # from the common start until this process was reaped
    max_rss: int  # bytes (the kernel's ru_maxrss of this child)
    out: Path
    err: Path
    # with sampling: the largest of each /proc/<pid>/status field seen (bytes), e.g. RssAnon
    peaks: dict[str, int] = field(default_factory=dict)


def child_env() -> dict[str, str]:
    """One thread everywhere; this checkout's soma first on the path."""
    env = dict(os.environ)
    for name in ("SOMA_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def memory_status(pid: int | str = "self") -> dict[str, int]:
    """The memory fields of /proc/<pid>/status, in bytes ({} once the process is gone)."""
    found = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in STATUS_FIELDS or key == "VmHWM":
                    found[key] = int(value.split()[0]) * 1024  # "1234 kB"
    except (OSError, ValueError, IndexError):
        pass
    return found


def run_together(
    commands: dict[str, list[str]], folder: Path, sample_every: float | None = None
) -> tuple[float, list[Finished]]:
    """Start every command at once (cwd `folder`, output to files there), wait for all; the
    wall time until the last exits, and each one's exit time and max RSS (`os.wait4`).
    With `sample_every` (seconds), also each one's peak of /proc/<pid>/status's memory
    fields (`Finished.peaks`), read that often while it runs: a sampled peak, which can miss
    a spike shorter than the interval."""
    folder.mkdir(parents=True, exist_ok=True)
    env, started, handles = child_env(), {}, []
    tic = time.perf_counter()
    for name, argv in commands.items():
        out, err = folder / f"{name}.out", folder / f"{name}.err"
        handles += [open(out, "wb"), open(err, "wb")]
        proc = subprocess.Popen(argv, stdout=handles[-2], stderr=handles[-1], cwd=folder, env=env)
        started[proc.pid] = (name, proc, out, err)
    peaks: dict[int, dict[str, int]] = {pid: {} for pid in started}
    finished, failed = [], []

    def reap(pid: int, status: int, usage: Any) -> None:
        name, proc, out, err = started[pid]
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds, rss = time.perf_counter() - tic, usage.ru_maxrss * 1024
        finished.append(Finished(name, seconds, rss, out, err, peaks[pid]))
        if proc.returncode != 0:
            failed.append(f"{name} exited {proc.returncode}: {err.read_text()[-1500:].strip()}")

    running = set(started)
    while running:
        if sample_every is None:
            pid, status, usage = os.wait4(-1, 0)
            if pid in running:
                running.discard(pid)
                reap(pid, status, usage)
            continue
        for pid in sorted(running):
            for key, value in memory_status(pid).items():
                peaks[pid][key] = max(value, peaks[pid].get(key, 0))
            pid_, status, usage = os.wait4(pid, os.WNOHANG)
            if pid_ == pid:
                running.discard(pid)
                reap(pid, status, usage)
        if running:
            time.sleep(sample_every)
    wall = time.perf_counter() - tic
    for handle in handles:
        handle.close()
    if failed:
        raise ChildFailed("; ".join(failed))
    return wall, sorted(finished, key=lambda f: list(commands).index(f.name))


def last_json(path: Path) -> dict[str, Any]:
    lines = path.read_text().strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def me(job: dict[str, Any]) -> list[str]:
    """The command line of this file as a child doing `job`."""
    return [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)]


def soma_client(store: Path, rounds: int, clients: int, mine: str, task: str, *extra: str):
    options = CONTROL_OPTIONS if task == CONTROL else {}
    argv = ["client", "--store", str(store), "--run", "bench", "--rounds", str(rounds)]
    argv += ["--clients", str(clients), "--mine", mine, "--task", task, "--evaluate", "none"]
    for key, value in options.items():
        argv += ["--option", f"{key}={value}"]
    return [*argv, *extra]


# --- What the children do ------------------------------------------------------------------


def model_bytes(weights: dict) -> int:
    return sum(t.numel() * t.element_size() for node in weights.values() for t in node.values())


def floor_child(rounds: int) -> None:
    """The digits federation in this process: train 10 clients, soma.fedavg, R times."""
    import torch

    torch.set_num_threads(1)
    from soma import fedavg
    from soma.nodes import export, load
    from soma.tasks import digits
    from soma.training import training_seed

    task = digits.make()
    tic = time.perf_counter()
    shards = [task.shard(k, CLIENTS) for k in range(CLIENTS)]
    nodes = task.nodes(0)
    weights = export(nodes)
    for r in range(rounds):
        exports = []
        for k, data in enumerate(shards):
            load(nodes, weights)
            task.train(nodes, data, seed=training_seed(0, r, k))
            exports.append(export(nodes))
        weights = fedavg(exports, [task.size(data) for data in shards])
    load(nodes, weights)
    accuracy = task.evaluate(nodes)["accuracy"]
    loop = time.perf_counter() - tic
    print(json.dumps({"loop": loop, "accuracy": accuracy, "model": model_bytes(weights)}))


def scale_floor_child(clients: int) -> None:
    """N control clients trained in this process and folded into one soma.fedavg (an
    iterator of (export, size): one model held at a time)."""
    import torch

    torch.set_num_threads(1)
    from soma import fedavg
    from soma.nodes import export, load
    from soma.tasks import load_task

    task = load_task(CONTROL, CONTROL_OPTIONS)
    nodes = task.nodes(0)
    start = export(nodes)
    training = 0.0

    def trained():
        nonlocal training
        for k in range(clients):
            tic = time.perf_counter()
            load(nodes, start)
            data = task.shard(k, clients)
            task.train(nodes, data, seed=k)
            weights = export(nodes)
            training += time.perf_counter() - tic
            yield weights, task.size(data)

    tic = time.perf_counter()
    mean = fedavg(trained())
    loop = time.perf_counter() - tic
    print(json.dumps({"loop": loop, "averaging": loop - training, "model": model_bytes(mean)}))


def _timed_method(cls: type, name: str, totals: dict[str, float]) -> None:
    method = getattr(cls, name)

    def timed(self, *args, **kwargs):
        tic = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - tic

    setattr(cls, name, timed)


def client_child(argv: list[str], report: str) -> int:
    """`soma client argv...`, timing its averaging: when this process last contributed and
    got each round's average (time.time(), comparable across processes), and the seconds it
    spent checking the inputs, building tree nodes and computing the final average."""
    import soma.round as round_module
    from soma import cli

    seconds = {"check": 0.0, "share": 0.0, "compute": 0.0}
    contributed: dict[int, float] = {}
    averaged: dict[int, float] = {}
    contribute, average_round = round_module.contribute, round_module.average_round

    def timed_contribute(store, meeting, *args, **kwargs):
        made = contribute(store, meeting, *args, **kwargs)
        contributed[meeting.round] = time.time()
        return made

    def timed_average_round(store, meeting, **kwargs):
        digest = average_round(store, meeting, **kwargs)
        averaged[meeting.round] = time.time()
        return digest

    round_module.contribute = timed_contribute
    round_module.average_round = timed_average_round
    for name in seconds:
        _timed_method(round_module._Averaging, name, seconds)
    code = cli.main(argv)
    times = {"seconds": seconds, "contributed": contributed, "averaged": averaged}
    Path(report).write_text(json.dumps(times))
    return code


def memory_child(job: dict[str, Any]) -> None:
    """Section 7, one process: the same imports whatever it does (the baseline stops there),
    then the setup (keep N random exports), the tree, the flat stream or the naive average.
    Prints its seconds of work and its own /proc/self/status at the end, as JSON."""
    import torch

    torch.set_num_threads(1)
    from soma.aggregate import fedavg
    from soma.round import holders
    from soma.round.tree import Leaf, reduce
    from soma.store import Store

    what, seconds, made = job["what"], 0.0, {}
    if what != "baseline":
        store = Store(job["store"])
        plan = Path(job["plan"])
        tic = time.perf_counter()
        if what == "setup":
            digests, sizes = [], []
            for k in range(job["clients"]):
                values = torch.randn(job["floats"], generator=torch.Generator().manual_seed(k))
                digests.append(store.put_value({"node": {"weight": values}}))
                sizes.append(1 + k % 7)
                del values
            plan.write_text(json.dumps({"digests": digests, "sizes": sizes}))
        else:
            kept = json.loads(plan.read_text())
            pairs = list(zip(kept["digests"], kept["sizes"], strict=True))
            if what == "tree":
                leaves = [Leaf(d, float(size)) for d, size in pairs]
                me = holders.me(role="bench", what=job["name"])
                root = reduce(store, "mem", leaves, job["fan_in"], me=me)
                made = {"root": root.mean}
            elif what == "flat":
                fedavg((store.recall_digest(d, lazy=True), size) for d, size in pairs)
            elif what == "naive":
                exports = [store.recall_digest(d) for d, _ in pairs]
                fedavg(exports, [size for _, size in pairs])
        seconds = time.perf_counter() - tic
    print(json.dumps({"work": seconds, "status": memory_status(), **made}))


def child(job: dict[str, Any]) -> int:
    if job["kind"] == "floor":
        floor_child(job["rounds"])
    elif job["kind"] == "scale_floor":
        scale_floor_child(job["clients"])
    elif job["kind"] == "client":
        return client_child(job["argv"], job["report"])
    elif job["kind"] == "memory":
        memory_child(job)
    return 0


# --- 1-3: the floor, and soma client processes ---------------------------------------------


def import_floor(folder: Path, repeats: int = 3) -> dict[str, float]:
    """`python -c 'import torch'`: the median wall time and max RSS of `repeats` runs."""
    runs = [
        run_together({"import": [sys.executable, "-c", "import torch"]}, folder)
        for _ in range(repeats)
    ]
    return {
        "wall": statistics.median(wall for wall, _ in runs),
        "rss": statistics.median(done[0].max_rss for _, done in runs),
    }


def baseline_rss(folder: Path) -> int:
    """The max RSS of a process that only imports torch and the soma modules a client uses."""
    _, done = run_together({"baseline": [sys.executable, "-c", BASELINE_IMPORTS]}, folder)
    return done[0].max_rss


def the_floor(rounds: int, folder: Path) -> dict[str, Any]:
    wall, done = run_together({"floor": me({"kind": "floor", "rounds": rounds})}, folder)
    result = last_json(done[0].out)
    return {
        "row": "floor: one process, in-process loop",
        "processes": 1,
        "wall": wall,
        "rss": [done[0].max_rss],
        "accuracy": result["accuracy"],
        "loop": result["loop"],
        "model": result["model"],
    }


def clients_in_processes(rounds: int, per_process: int, folder: Path) -> dict[str, Any]:
    """`soma client` for 10 digits clients, `per_process` clients a process, all at once."""
    store = folder / "store"
    commands = {}
    for first in range(0, CLIENTS, per_process):
        mine = f"{first}-{first + per_process - 1}" if per_process > 1 else str(first)
        argv = soma_client(store, rounds, CLIENTS, mine, DIGITS)
        commands[f"p{first}"] = [sys.executable, "-m", "soma.cli", *argv]
    wall, done = run_together(commands, folder)
    accuracy = last_json(done[0].out).get("evaluation", {}).get("accuracy")
    return {
        "row": f"soma client, {per_process} client(s) a process",
        "processes": len(done),
        "wall": wall,
        "rss": [d.max_rss for d in done],
        "accuracy": accuracy,
    }


def mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:.0f}"


def processes_table(rows: list[dict[str, Any]], floor: dict[str, Any], torch_rss: float) -> str:
    head = ["run", "processes", "wall s", "x floor", "s/round", "largest max RSS MiB"]
    head += ["above import torch MiB", "sum of max RSS MiB", "test accuracy"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['row']} | failed: {row['error'][:300]}")
            continue
        largest = max(row["rss"])
        accuracy = "-" if row.get("accuracy") is None else f"{row['accuracy']:.3f}"
        per_round = "-" if row.get("rounds") is None else f"{row['wall'] / row['rounds']:.3f}"
        lines.append(
            " | ".join(
                [
                    row["row"],
                    str(row["processes"]),
                    f"{row['wall']:.2f}",
                    f"{row['wall'] / floor['wall']:.2f}",
                    per_round,
                    mib(largest),
                    mib(largest - torch_rss),
                    mib(sum(row["rss"])),
                    accuracy,
                ]
            )
        )
    return "\n".join(lines)


# --- 4: the workflow -----------------------------------------------------------------------


def snakemake(folder: Path, config: list[str], *flags: str) -> list[str]:
    argv = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "-d", str(folder)]
    return [*argv, *flags, "--cores", "2", "--config", *config, f"store={folder / 'store'}"]


def job_benchmarks(folder: Path, run: str) -> list[dict[str, Any]]:
    """Every job's Snakemake benchmark: its path, seconds (`s`) and max RSS (MiB)."""
    jobs = []
    root = folder / "logs" / run / "benchmark"
    for tsv in sorted(root.rglob("*.tsv")):
        rows = list(tsv.read_text().splitlines())
        head, last = rows[0].split("\t"), rows[-1].split("\t")
        values = dict(zip(head, last, strict=False))
        try:
            rss = float(values.get("max_rss", "nan")) * MIB
        except ValueError:
            rss = float("nan")
        jobs.append({"job": str(tsv.relative_to(root)), "s": float(values["s"]), "rss": rss})
    return jobs


def steady_per_round(folder: Path, run: str, rounds: int) -> float | None:
    """Seconds between the first and the last round's average receipt, per round."""
    if rounds < 2:
        return None
    receipts = [
        folder / "results" / run / "round" / str(r) / "average.json" for r in (0, rounds - 1)
    ]
    first, last = (path.stat().st_mtime for path in receipts)
    return (last - first) / (rounds - 1)


def the_workflow(rounds: int, per_job: int, folder: Path) -> dict[str, Any]:
    config = [f"rounds={rounds}", f"clients={CLIENTS}", "run=bench", f"clients_per_job={per_job}"]
    config.append('baselines={"alone": false, "centralized": false}')
    wall, done = run_together({"snakemake": snakemake(folder, config)}, folder)
    jobs = job_benchmarks(folder, "bench")
    # the train jobs: one per client, per batch, or (a batch of the whole round) the round's
    train = [
        j["s"]
        for j in jobs
        if "/client/" in j["job"] or "/batch/" in j["job"] or j["job"].endswith("/round.tsv")
    ]
    row = {
        "per_job": per_job,
        "rounds": rounds,
        "wall": wall,
        "jobs": len(jobs),
        "median_job": statistics.median(j["s"] for j in jobs),
        "median_train": statistics.median(train),
        "largest_job_rss": max(j["rss"] for j in jobs),
        "snakemake_rss": done[0].max_rss,
        "steady": steady_per_round(folder, "bench", rounds),
    }
    return row


def workflow_table(rows: list[dict[str, Any]], floor_round: float, torch_floor: float) -> str:
    head = ["clients_per_job", "jobs", "wall s", "s/round (wall)", "steady s/round"]
    head += ["above floor s/round", "x floor a round", "median job s", "- import torch"]
    head += ["median train job s", "- import torch", "largest job RSS MiB", "snakemake RSS MiB"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['per_job']} | failed: {row['error'][:300]}")
            continue
        steady = row["steady"] if row["steady"] is not None else row["wall"] / row["rounds"]
        lines.append(
            " | ".join(
                [
                    str(row["per_job"]),
                    str(row["jobs"]),
                    f"{row['wall']:.1f}",
                    f"{row['wall'] / row['rounds']:.2f}",
                    f"{steady:.2f}",
                    f"{steady - floor_round:.2f}",
                    f"{steady / floor_round:.0f}",
                    f"{row['median_job']:.2f}",
                    f"{row['median_job'] - torch_floor:+.2f}",
                    f"{row['median_train']:.2f}",
                    f"{row['median_train'] - torch_floor:+.2f}",
                    mib(row["largest_job_rss"]),
                    mib(row["snakemake_rss"]),
                ]
            )
        )
    return "\n".join(lines)


# --- 6: one round of many clients, and the DAG of a big run --------------------------------


def scale_floor(clients: int, folder: Path) -> dict[str, Any]:
    wall, done = run_together({"floor": me({"kind": "scale_floor", "clients": clients})}, folder)
    result = last_json(done[0].out)
    return {
        "clients": clients,
        "how": "in-process floor",
        "processes": 1,
        "wall": wall,
        "averaging": result["averaging"],
        "rss": [done[0].max_rss],
        "model": result["model"],
        "parts": None,
    }


def one_round(clients: int, tree: int | None, folder: Path) -> dict[str, Any]:
    """One round of `clients` control clients over 2 processes, each timing its averaging."""
    store, half = folder / "store", clients // 2
    extra = ("--tree", str(tree)) if tree else ()
    commands, reports = {}, []
    for name, mine in (("a", f"0-{half - 1}"), ("b", f"{half}-{clients - 1}")):
        reports.append(folder / f"{name}.times.json")
        argv = soma_client(store, 1, clients, mine, CONTROL, *extra)
        commands[name] = me({"kind": "client", "argv": argv, "report": str(reports[-1])})
    wall, done = run_together(commands, folder)
    times = [json.loads(path.read_text()) for path in reports]
    averaging = max(t["averaged"]["0"] for t in times) - max(t["contributed"]["0"] for t in times)
    parts = {name: max(t["seconds"][name] for t in times) for name in ("check", "share", "compute")}
    how = f"soma client, tree {tree}" if tree else "soma client, flat"
    return {
        "clients": clients,
        "how": how,
        "processes": 2,
        "wall": wall,
        "averaging": averaging,
        "rss": [d.max_rss for d in done],
        "parts": parts,
    }


def one_client_rss(folder: Path) -> int:
    """The max RSS of a `soma client` process that trains one control client for one round."""
    argv = soma_client(folder / "store", 1, 1, "0", CONTROL)
    _, done = run_together({"one": [sys.executable, "-m", "soma.cli", *argv]}, folder)
    return done[0].max_rss


def scale_table(rows: list[dict[str, Any]], baseline: int, one_client: int) -> str:
    head = ["clients", "how", "processes", "wall s", "x floor", "averaging s"]
    head += ["check/tree/final s", "largest max RSS MiB", "above baseline MiB", "in models"]
    head += ["above 1-client process MiB"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    floors = {row["clients"]: row for row in rows if row["how"] == "in-process floor"}
    for row in rows:
        if "error" in row:
            lines.append(f"{row['clients']} | {row['how']} | failed: {row['error'][:300]}")
            continue
        floor = floors.get(row["clients"])
        ratio = "-" if floor is None or "error" in floor else f"{row['wall'] / floor['wall']:.2f}"
        model = next((r["model"] for r in rows if "model" in r), None)
        above = max(row["rss"]) - baseline
        in_models = "-" if not model else f"{above / model:,.0f}"
        parts = row["parts"]
        split = "-" if parts is None else "/".join(f"{parts[k]:.2f}" for k in parts)
        lines.append(
            " | ".join(
                [
                    f"{row['clients']:,}",
                    row["how"],
                    str(row["processes"]),
                    f"{row['wall']:.1f}",
                    ratio,
                    f"{row['averaging']:.2f}",
                    split,
                    mib(max(row["rss"])),
                    mib(above),
                    in_models,
                    mib(max(row["rss"]) - one_client),
                ]
            )
        )
    return "\n".join(lines)


def dry_run(per_job: int, folder: Path) -> dict[str, Any]:
    """`snakemake -n` of the 1,000-client, 10-round control run with `per_job` per train job."""
    config = [f"task={CONTROL}", "metric=loss", f"clients={DAG_CLIENTS}", f"rounds={DAG_ROUNDS}"]
    config += [f"clients_per_job={per_job}", f"tree={{fan_in: {FAN_IN}}}", "run=dag"]
    wall, done = run_together({"dry": snakemake(folder, config, "-n")}, folder)
    total = re.search(r"^total\s+(\d+)", done[0].out.read_text(), re.MULTILINE)
    jobs = int(total.group(1)) if total else None
    return {"per_job": per_job, "wall": wall, "jobs": jobs, "rss": done[0].max_rss}


def dag_table(rows: list[dict[str, Any]]) -> str:
    lines = ["clients_per_job | jobs | snakemake -n s | max RSS MiB", "--- | --- | --- | ---"]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['per_job']} | failed: {row['error'][:300]}")
        else:
            lines.append(
                f"{row['per_job']} | {row['jobs']} | {row['wall']:.1f} | {mib(row['rss'])}"
            )
    return "\n".join(lines)


# --- 7: memory per process, with a model big enough to see -----------------------------------


MEMORY_ROWS = {
    "tree": f"(a) soma.round.tree.reduce, fan-in {MEMORY_FAN_IN}, 2 processes sharing it",
    "flat": "(b) flat soma.fedavg over lazy recalls (an iterator)",
    "naive": "(c) naive: every export recalled eagerly, then soma.fedavg",
}


def _anon(done: Finished) -> int:
    """The peak anonymous memory seen: sampled, or the process's own reading at its end."""
    final = last_json(done.out).get("status", {}).get("RssAnon", 0)
    return max(done.peaks.get("RssAnon", 0), final)


def memory_section(clients: int, folder: Path) -> dict[str, Any]:
    """Keep `clients` exports of MEMORY_MODEL bytes (a helper process), then measure, each
    in fresh processes: a baseline that only imports (twice, the smaller kept), the tree
    with 2 processes, the flat stream, and the naive average."""
    store, plan = folder / "store", folder / "plan.json"

    def job(what: str, name: str = "") -> list[str]:
        return me(
            {"kind": "memory", "what": what, "name": name, "store": str(store),
             "plan": str(plan), "clients": clients, "floats": MEMORY_FLOATS,
             "fan_in": MEMORY_FAN_IN}
        )  # fmt: skip

    section: dict[str, Any] = {"clients": clients, "rows": []}
    try:
        section["setup"], _ = run_together({"setup": job("setup")}, folder / "setup")
        print(f"  memory: {clients} exports of {mib(MEMORY_MODEL)} MiB kept in "
              f"{section['setup']:.1f} s", flush=True)  # fmt: skip
        baselines = [
            run_together({"baseline": job("baseline")}, folder / f"baseline{k}", SAMPLE_EVERY)[1][0]
            for k in range(2)
        ]
        section["baseline"] = {
            "rss": min(b.max_rss for b in baselines),
            "anon": min(_anon(b) for b in baselines),
        }
        commands = {
            "tree": {"p0": job("tree", "p0"), "p1": job("tree", "p1")},
            "flat": {"flat": job("flat")},
            "naive": {"naive": job("naive")},
        }
        for what, row in MEMORY_ROWS.items():
            section["rows"].append(
                attempt({"row": row}, memory_row, row, commands[what], folder / what)
            )
    except ChildFailed as error:
        section["error"] = str(error)
        print(f"  memory: failed: {section['error'][:500]}", flush=True)
    return section


def memory_row(row: str, commands: dict[str, list[str]], folder: Path) -> dict[str, Any]:
    wall, done = run_together(commands, folder, SAMPLE_EVERY)
    reports = [last_json(d.out) for d in done]
    roots = {r["root"] for r in reports if "root" in r}
    if len(roots) > 1:
        raise ChildFailed(f"the tree's processes returned different roots: {sorted(roots)}")
    return {
        "row": row,
        "processes": len(done),
        "wall": wall,
        "work": [r["work"] for r in reports],
        "rss": [d.max_rss for d in done],
        "anon": [_anon(d) for d in done],
        "file": [d.peaks.get("RssFile", 0) for d in done],
        "samples": SAMPLE_EVERY,
    }


def memory_table(section: dict[str, Any]) -> str:
    head = ["row", "processes", "wall s", "work s", "peak RSS above baseline MiB", "in models"]
    head += ["peak anonymous above baseline MiB (sampled)", "in models"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    base = section.get("baseline", {})
    for row in section["rows"]:
        if "error" in row:
            lines.append(f"{row['row']} | failed: {row['error'][:300]}")
            continue
        rss = [r - base["rss"] for r in row["rss"]]
        anon = [a - base["anon"] for a in row["anon"]]

        def each(values: list[int], unit: float, fmt: str) -> str:
            return " / ".join(format(v / unit, fmt) for v in values)

        lines.append(
            " | ".join(
                [
                    row["row"],
                    str(row["processes"]),
                    f"{row['wall']:.1f}",
                    " / ".join(f"{w:.1f}" for w in row["work"]),
                    each(rss, MIB, ".0f"),
                    each(rss, MEMORY_MODEL, ".1f"),
                    each(anon, MIB, ".0f"),
                    each(anon, MEMORY_MODEL, ".1f"),
                ]
            )
        )
    return "\n".join(lines)


def memory_report(section: dict[str, Any]) -> None:
    base = section.get("baseline")
    print(
        f"\n## 7: memory per process: {section['clients']} exports of one float32 node of "
        f"{MEMORY_FLOATS:,} floats (one model = {mib(MEMORY_MODEL)} MiB), kept beforehand by a "
        f"helper process" + (f" in {section['setup']:.1f} s" if "setup" in section else "")
    )
    if base:
        print(
            f"baseline: a process that imports torch, soma.store, soma.round.tree, soma.aggregate, "
            f"soma.round.holders and stops: max RSS {mib(base['rss'])} MiB, anonymous "
            f"{mib(base['anon'])} MiB (the smaller of 2 runs)\n"
        )
    if "error" in section:
        print(f"failed: {section['error'][:1000]}")
    if section["rows"]:
        print(memory_table(section))
    print(
        "\nx / y: each process of the row. work s: the averaging alone, imports excluded. "
        "RSS is the kernel's max RSS (ru_maxrss): it includes the file-backed pages of the "
        "lazily recalled blobs (copy-on-write mmap) while they are mapped and touched, which "
        "the kernel can drop and re-read; anonymous is RssAnon of /proc/<pid>/status, the "
        f"largest of samples every {SAMPLE_EVERY * 1000:.0f} ms and the process's own reading "
        "at its end: a sampled peak, which can miss a spike shorter than the interval."
    )


def bookkeeping(results: dict[str, Any]) -> tuple[float, str] | None:
    """MiB of max RSS per 1,000 clients in section 6's tree rows: the slope between the
    smallest and the largest N (None with one N, as with --quick)."""
    tree = sorted(
        (r for r in results.get("scale", []) if "tree" in r["how"] and "rss" in r),
        key=lambda r: r["clients"],
    )
    if len(tree) < 2 or tree[-1]["clients"] == tree[0]["clients"]:
        return None
    low, high = tree[0], tree[-1]
    grown = max(high["rss"]) - max(low["rss"])
    how = f"from {low['clients']:,} to {high['clients']:,} clients"
    return grown / MIB / (high["clients"] - low["clients"]) * 1000, how


def judge_memory(results: dict[str, Any], targets: Targets) -> None:
    """The memory target on section 7's row (a): every process's anonymous memory above
    the baseline under 3 models; with section 6's bookkeeping projected to 10,000."""
    section = results.get("memory", {})
    base = section.get("baseline")
    tree = next((r for r in section.get("rows", []) if "tree" in r["row"]), {})
    what = (
        "hierarchical aggregation: every process under 3x one model's memory (section 7 "
        "row a, anonymous above baseline)"
    )
    if not base or "anon" not in tree:
        targets.say(what, None, section.get("error", "failed")[:300])
        return
    anon = [(a - base["anon"]) / MEMORY_MODEL for a in tree["anon"]]
    rss = [(r - base["rss"]) / MEMORY_MODEL for r in tree["rss"]]
    measured = (
        f"{section['clients']} clients, fan-in {MEMORY_FAN_IN}, 2 processes: "
        + ", ".join(f"{a:.2f}" for a in anon)
        + f" models of {mib(MEMORY_MODEL)} MiB (sampled every {SAMPLE_EVERY * 1000:.0f} ms); "
        "with the mapped blobs' file pages (max RSS) " + ", ".join(f"{r:.2f}" for r in rss)
    )
    slope = bookkeeping(results)
    if slope is not None:
        per_1000, how = slope
        measured += (
            f"; not in the verdict: section 6's bookkeeping, {per_1000:.1f} MiB per 1,000 "
            f"clients ({how}), is {per_1000 * 10:.0f} MiB = "
            f"{per_1000 * 10 * MIB / MEMORY_MODEL:.2f} models of this size at 10,000 clients"
        )
    targets.say(what, max(anon) < MODEL_MEMORY_TARGET, measured)


# --- Targets --------------------------------------------------------------------------------


@dataclass
class Targets:
    lines: list[str] = field(default_factory=list)

    def say(self, what: str, met: bool | None, measured: str) -> None:
        verdict = "not measured" if met is None else ("met" if met else "NOT MET")
        self.lines.append(f"- {what}: {verdict} ({measured})")


def judge(results: dict[str, Any], args: argparse.Namespace) -> list[str]:
    targets = Targets()
    floor, torch_floor = results["floor"], results["import"]["wall"]
    two = next((r for r in results["processes"] if r.get("processes") == 2), {})
    if "wall" in two:
        ratio = two["wall"] / floor["wall"]
        measured = f"{two['wall']:.1f} s against {floor['wall']:.1f} s: {ratio:.2f}x"
        met: bool | None = ratio <= CLIENT_RATIO_TARGET
    else:
        measured, met = "failed", None
    what = f"2 soma client processes, {CLIENTS} clients x {args.rounds} rounds, <= 2x the floor"
    targets.say(what, met, measured)
    floor_round = floor["wall"] / args.rounds
    batched = next((r for r in results["workflow"] if r["per_job"] == CLIENTS), {})
    if "wall" in batched:
        steady = batched["steady"] or batched["wall"] / batched["rounds"]
        measured = f"{steady:.2f} s a round, {steady - floor_round:.2f} s above the floor's"
        met = steady - floor_round <= ROUND_ABOVE_TARGET
    else:
        measured, met = "failed", None
    targets.say("workflow, one train job per round, <= 3 s a round above the floor", met, measured)
    ran = [r for r in results["workflow"] if "wall" in r]
    overheads = [(r["per_job"], r["median_job"] - torch_floor) for r in ran]
    measured = ", ".join(f"clients_per_job={k}: {o:+.2f} s" for k, o in overheads) or "failed"
    met = all(o <= JOB_OVERHEAD_TARGET for _, o in overheads) if overheads else None
    targets.say("per-job overhead <= 0.5 s beyond import torch (median job)", met, measured)
    judge_memory(results, targets)
    biggest = max(args.scale)
    tree = [r for r in results["scale"] if r["clients"] == biggest and "tree" in r["how"]]
    if tree and "rss" in tree[0]:
        above = max(tree[0]["rss"]) - results["baseline"]
        measured = (
            f"{tree[0]['wall']:.0f} s; largest process {mib(max(tree[0]['rss']))} MiB, "
            f"{above / MIB:.1f} MiB above the baseline's {mib(results['baseline'])} MiB"
        )
        slope = bookkeeping(results)
        if slope is not None:
            measured += f"; max RSS grows {slope[0]:.1f} MiB per 1,000 clients ({slope[1]})"
        else:
            measured += "; MiB per 1,000 clients needs two sizes (the full run)"
        met = True
    else:
        measured, met = tree[0].get("error", "failed")[:300] if tree else "not run", False
    what = f"{biggest:,}-client round through the tree (section 6, control task) completes"
    targets.say(what, met, measured)
    dags = [r for r in results["dag"] if "wall" in r]
    measured = ", ".join(f"clients_per_job={r['per_job']}: {r['wall']:.1f} s" for r in dags)
    met = all(r["wall"] < DAG_TARGET for r in dags) if dags else None
    what = f"snakemake -n of {DAG_CLIENTS:,} clients x {DAG_ROUNDS} rounds under 30 s"
    targets.say(what, met, measured or "failed")
    return targets.lines


# --- The parent ------------------------------------------------------------------------------


def attempt(row: dict[str, Any], measure, *args) -> dict[str, Any]:
    """`measure(*args)`, or `row` with the error when a child failed (the run goes on)."""
    try:
        made = measure(*args)
    except ChildFailed as error:
        made = {**row, "error": str(error)}
    label = made.get("row") or made.get("how") or f"clients_per_job={made.get('per_job')}"
    size = f"{made['clients']:,} clients, " if "clients" in made else ""
    took = f"{made['wall']:.1f} s" if "wall" in made else f"failed: {made['error'][:500]}"
    print(f"  {size}{label}: {took}", flush=True)
    return made


def measure_processes(args: argparse.Namespace, folder: Path, results: dict[str, Any]) -> None:
    """1-3: import torch, the floor, and soma client with 1, 5 and 10 clients a process."""
    results["import"] = imported = import_floor(folder / "import")
    results["floor"] = floor = the_floor(args.rounds, folder / "floor")
    print(f"  import torch {imported['wall']:.2f} s; floor {floor['wall']:.2f} s", flush=True)
    rows = [
        {"row": "python -c 'import torch' (median of 3)", "processes": 1,
         "wall": imported["wall"], "rss": [imported["rss"]]},
        {**floor, "rounds": args.rounds},
    ]  # fmt: skip
    for per_process in (1, 5, 10):
        row = {"row": f"soma client, {per_process} a process", "processes": CLIENTS // per_process}
        place = folder / f"clients{per_process}"
        made = attempt(row, clients_in_processes, args.rounds, per_process, place)
        rows.append({**made, "rounds": args.rounds})
    results["processes"] = rows


def measure_workflow(args: argparse.Namespace, folder: Path, results: dict[str, Any]) -> None:
    """4: the workflow with a train job per client, and with one per round."""
    results["workflow"] = [
        attempt({"per_job": k}, the_workflow, args.workflow_rounds, k, folder / f"workflow{k}")
        for k in (1, CLIENTS)
    ]


def measure_scale(args: argparse.Namespace, folder: Path, results: dict[str, Any]) -> None:
    """6: the baselines of memory, then one round of N clients: in one process, through the
    tree, and (for the smallest N) flat."""
    results["baseline"] = baseline_rss(folder / "baseline")
    results["one_client"] = one_client_rss(folder / "one")
    results["scale"] = []
    for clients in args.scale:
        runs = [("in-process floor", scale_floor, (clients,))]
        runs.append((f"soma client, tree {FAN_IN}", one_round, (clients, FAN_IN)))
        if clients == min(args.scale):
            runs.append(("soma client, flat", one_round, (clients, None)))
        for how, measure, extra in runs:
            place = folder / f"scale{clients}-{len(results['scale'])}"
            row = {"clients": clients, "how": how}
            results["scale"].append(attempt(row, measure, *extra, place))


def measure_dag(folder: Path, results: dict[str, Any]) -> None:
    """6: `snakemake -n` of the big run, 50 clients and 1 client a train job."""
    results["dag"] = [attempt({"per_job": k}, dry_run, k, folder / f"dag{k}") for k in (50, 1)]


def measure_memory(args: argparse.Namespace, folder: Path, results: dict[str, Any]) -> None:
    """7: memory per process with a 16 MiB model: tree, flat, naive."""
    results["memory"] = memory_section(args.memory_clients, folder / "memory")


def report(args: argparse.Namespace, results: dict[str, Any]) -> None:
    floor, torch_floor = results["floor"], results["import"]["wall"]
    floor_round = floor["wall"] / args.rounds
    print(f"\n## 1-3, 5: {CLIENTS} digits clients x {args.rounds} rounds, x floor in wall time\n")
    print(processes_table(results["processes"], floor, results["import"]["rss"]))
    print(
        f"\nthe floor's loop alone (no imports): {floor['loop']:.2f} s, "
        f"{floor['loop'] / args.rounds * 1000:.1f} ms a round; the digits model is "
        f"{floor['model']:,} bytes"
    )
    print(
        f"\n## 4, 5: the workflow, {CLIENTS} clients x {args.workflow_rounds} rounds, --cores 2 "
        f"(floor: {floor_round:.3f} s a round, import torch {torch_floor:.2f} s)\n"
    )
    print(workflow_table(results["workflow"], floor_round, torch_floor))
    print(
        "\nsteady s/round: between round 0's and the last round's average receipt; "
        "jobs: start, train, average, evaluate, summary, model"
    )
    print(
        f"\n## 6: one round of many control clients ({CONTROL_OPTIONS}), 2 processes; "
        f"baseline RSS {mib(results['baseline'])} MiB ({BASELINE_IMPORTS}); "
        f"a 1-client process {mib(results['one_client'])} MiB\n"
    )
    print(scale_table(results["scale"], results["baseline"], results["one_client"]))
    print(f"\n## 6: snakemake -n, {DAG_CLIENTS:,} control clients x {DAG_ROUNDS} rounds\n")
    print(dag_table(results["dag"]))
    memory_report(results["memory"])
    print("\n## targets\n")
    print("\n".join(judge(results, args)))


def only_memory(args: argparse.Namespace) -> int:
    """`--only memory`: section 7 and its target, nothing else."""
    start = time.perf_counter()
    print(
        f"section 7 only: {args.memory_clients} exports of {mib(MEMORY_MODEL)} MiB, load "
        f"average {os.getloadavg()[0]:.1f} (on {os.cpu_count()} cores)",
        flush=True,
    )
    results: dict[str, Any] = {}
    # every row's folder is kept until the end: on ext4 without a journal a file made among
    # thousands removed moments ago costs ~0.3 ms of the kernel's time (benchmarks/simulation.py)
    with tempfile.TemporaryDirectory(prefix="soma-rounds-") as tmp:
        measure_memory(args, Path(tmp), results)
    memory_report(results["memory"])
    targets = Targets()
    judge_memory(results, targets)
    print("\n## targets\n")
    print("\n".join(targets.lines))
    print(f"\ntotal: {time.perf_counter() - start:.0f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 rounds, 3 in the workflow, 1,000")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of rows 1-3 (50)")
    parser.add_argument("--workflow-rounds", type=int, default=None, help="workflow rounds (5)")
    parser.add_argument(
        "--memory-clients", type=int, default=None, help="exports in section 7 (64; 16 quick)"
    )
    parser.add_argument("--only", choices=["memory"], help="run and report only this section")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    args.memory_clients = args.memory_clients or (16 if args.quick else 64)
    if args.memory_clients < 2:
        raise SystemExit("--memory-clients must be at least 2")
    if args.only == "memory":
        return only_memory(args)
    args.rounds = args.rounds or (10 if args.quick else 50)
    args.workflow_rounds = args.workflow_rounds or (3 if args.quick else 5)
    args.scale = (1000,) if args.quick else (1000, 10_000)
    if args.rounds < 1 or args.workflow_rounds < 1:
        raise SystemExit("--rounds and --workflow-rounds must be at least 1")

    start = time.perf_counter()
    print(
        f"{CLIENTS} digits clients, {args.rounds} rounds ({args.workflow_rounds} in the "
        f"workflow), one torch thread per process, load average {os.getloadavg()[0]:.1f} "
        f"(on {os.cpu_count()} cores), python {sys.version.split()[0]}",
        flush=True,
    )
    results: dict[str, Any] = {}
    # every row's folder is kept until the end: on ext4 without a journal a file made among
    # thousands removed moments ago costs ~0.3 ms of the kernel's time (benchmarks/simulation.py)
    with tempfile.TemporaryDirectory(prefix="soma-rounds-") as tmp:
        folder = Path(tmp)
        measure_processes(args, folder, results)
        measure_workflow(args, folder, results)
        measure_scale(args, folder, results)
        measure_dag(folder, results)
        measure_memory(args, folder, results)
    report(args, results)
    print(f"\ntotal: {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
