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

The sections live in three files beside this one: section 6 in rounds_scale.py, section 7 in
rounds_memory.py, and what every section shares (the children's machinery, the constants)
in _rounds_common.py; this file runs them, reports and judges.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _measure import recorded
from _rounds_common import (
    BASELINE_IMPORTS,
    CLIENTS,
    CONTROL_OPTIONS,
    DAG_CLIENTS,
    DAG_ROUNDS,
    DIGITS,
    FAN_IN,
    MIB,
    Targets,
    attempt,
    last_json,
    me,
    mib,
    model_bytes,
    run_together,
    snakemake,
    soma_client,
)
from rounds_memory import (
    MEMORY_MODEL,
    bookkeeping,
    judge_memory,
    memory_child,
    memory_report,
    memory_section,
)
from rounds_scale import (
    DAG_TARGET,
    baseline_rss,
    client_child,
    dag_table,
    dry_run,
    one_client_rss,
    one_round,
    scale_floor,
    scale_floor_child,
    scale_table,
)

# The targets.
CLIENT_RATIO_TARGET = 2.0  # 2 soma client processes, at most this x the floor's wall time
ROUND_ABOVE_TARGET = 3.0  # workflow, one train job per round: seconds a round above the floor
JOB_OVERHEAD_TARGET = 0.5  # seconds per job beyond `import torch`


# --- What the children do -------------------------------------------------------------------


def floor_child(rounds: int) -> None:
    """The digits federation in this process: train 10 clients, soma.fedavg, R times."""
    import torch

    torch.set_num_threads(1)
    from _measure import plain_federation

    from soma.tasks import digits

    task = digits.make()
    tic = time.perf_counter()
    nodes, weights = plain_federation(task, CLIENTS, rounds)
    accuracy = task.evaluate(nodes)["accuracy"]
    loop = time.perf_counter() - tic
    print(json.dumps({"loop": loop, "accuracy": accuracy, "model": model_bytes(weights)}))


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


# --- 4: the workflow ------------------------------------------------------------------------


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


# --- Targets --------------------------------------------------------------------------------


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


# --- The parent -----------------------------------------------------------------------------


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
    with recorded("rounds"):  # a run that fails records nothing
        return measure(args)


def measure(args: argparse.Namespace) -> int:
    """The sections the options ask for, and their report."""
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
