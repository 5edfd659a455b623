"""Synchronous rounds against the asynchronous array under a queue that holds some clients, on
the test cluster: time to a target accuracy and core-hours spent (issue 56, item 4).

    bash tests/slurm/start.sh                  # the single-node test cluster (root, Debian 12)
    python benchmarks/slurm_queue.py           # 4 clients, 2 of them held 30-120 s, each mode
    python benchmarks/slurm_queue.py --quick   # 1 held 15-30 s, fewer rounds (a smoke run)
    python benchmarks/slurm_queue.py --modes async,all --seed 3

The same small federated run (digits: a softmax, one local epoch, each client holding 3 of the
10 digits) is made in each mode as one array of workflow/sbatch/soma-async-array.sbatch, task
k being client k, every task submitted held: the seeded schedule releases the clients it does
not hold at once and each held one at its own seeded time after the submission (the same
clients and times in every mode, `Schedule`). The modes:

- `all`: synchronous rounds (BUFFER=0), each waiting for every client;
- `quorum`: synchronous rounds averaged without the missing once `--deadline` seconds passed,
  if at least `--quorum` clients came (default half of them; `soma client --quorum`): the
  practitioner's baseline against stragglers (below the quorum at the deadline, a round fails);
- `short`: the same quorum with a short deadline, the nearest soma comes to over-selection
  (soma has none: `--participation` samples a cohort, but a round closes at its deadline, never
  at the K-th arrival; and the deadline must outlast the store's patience plus 20 s, `PATIENCE`);
- `async`: the asynchronous array (FedBuff, `--buffer`), versions made from whichever updates
  came, the default staleness weight (polynomial, (1 + s)^-0.5);
- `constant`: the same with a constant staleness weight (issue 56 asks which default).

An asynchronous run ends at its budget of versions (`--versions`), which is set to outlast the
holds: the clients that run make a version every fraction of a second on this task, and with a
small budget they spend it before a held client starts, the run ending without its digits.

Per mode: the seconds from the submission until the test accuracy of a round's average (or a
version) first reaches each of `--targets` (the rounds or versions it took), the core-hours
the tasks held until then, the seconds until the run's last one, the core-hours Slurm
accounted to its tasks in all (soma.slurm.cost: allocated cores x elapsed), the CPU hours they
used, the share of their time spent queued, and the final and best accuracy (a mode marked *
did not finish: a task failed, or it ran past HANG). Accuracy is that of
benchmarks/asynchronous.py (the task's test set), of every average or version read back from
the run's store; its time is when this process first saw it there (polled each second: a
record's `averaged_by.when` is when its maker began to wait, up to a deadline earlier). Once
a run has its rounds, the tasks still pending are cancelled (they would start only to end): a
held client released after a quorum run ended costs nothing, one released before it trains the
rounds it missed, as `soma client` does. Every wait polls Slurm or the store.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _measure, also when imported

from _measure import recorded  # noqa: E402
from asynchronous import TASKS, first  # noqa: E402

from soma.nodes import load  # noqa: E402
from soma.round import layout, status  # noqa: E402
from soma.round.once import read_record  # noqa: E402
from soma.slurm.cost import sacct_costs, total  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.tasks import load_task  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ARRAY = ROOT / "workflow" / "sbatch" / "soma-async-array.sbatch"
TEST_CONF = Path(os.environ.get("SOMA_SLURM_STATE", "/tmp/soma-slurm")) / "etc" / "slurm.conf"
PARTITION = os.environ.get("SOMA_SLURM_PARTITION", "debug")
TASK, DIGITS = TASKS["digits"]
OPTIONS = {**DIGITS, "labels_per_client": 3}  # 4 clients cover the 10 digits
MODES = ("all", "quorum", "short", "async", "constant")
HANG = 1800.0  # seconds a mode may take before it is cancelled and said unfinished
# The store's patience (SOMA_STORE_PATIENCE) in the tasks: a quorum's deadline must outlast it
# plus a fault note's grace (20 s), and the default 120 s would make every deadline >= 140 s.
# The store is a local folder here, whose writes do not need minutes of retries.
PATIENCE = 5


@dataclass(frozen=True)
class Schedule:
    """Which clients the queue holds and for how long after the submission, drawn from the
    seed; every mode gets the same."""

    held: dict[int, float]  # client -> seconds after submission it is released

    @classmethod
    def drawn(cls, seed: int, clients: int, held: int, low: float, high: float) -> Schedule:
        rng = random.Random(seed)
        return cls(
            {k: round(rng.uniform(low, high), 1) for k in sorted(rng.sample(range(clients), held))}
        )

    def said(self) -> str:
        return ", ".join(f"client {k} released at {s:g} s" for k, s in self.held.items())


@dataclass(frozen=True)
class Mode:
    name: str
    buffer: int  # 0: synchronous rounds
    rounds: int  # rounds, or versions
    deadline: float
    extra: tuple[str, ...] = ()
    staleness: str = "polynomial"  # asynchronous: how a stale update weighs (soma's default)


@dataclass
class Outcome:
    mode: Mode
    curve: list[tuple[float, float]]  # (seconds after submission, test accuracy)
    cost: Any  # soma.slurm.cost.Total
    states: dict[str, str]
    finished: bool
    spans: list[tuple[float, float, int]]  # each task that started: from, to (s), its cores

    def hours_until(self, seconds: float) -> float:
        """Core-hours the tasks held until `seconds` after the submission (allocated, as
        soma.slurm.cost counts them: cores x time held)."""
        held = (max(0.0, min(to, seconds) - at) * cores for at, to, cores in self.spans)
        return sum(held) / 3600


def modes(args: argparse.Namespace) -> list[Mode]:
    """The modes `--modes` names, each with its rounds (or versions) and waits."""
    quorum = ("--quorum", str(args.quorum or (args.clients + 1) // 2))
    every = {
        "all": Mode("sync, all wait", 0, args.rounds, HANG),
        "quorum": Mode(f"sync, quorum {quorum[1]}, {args.deadline:g} s", 0, args.rounds,
                       args.deadline, quorum),
        "short": Mode(f"sync, quorum {quorum[1]}, {args.short:g} s", 0, args.rounds, args.short,
                      quorum),
        "async": Mode(f"async, buffer {args.buffer}", args.buffer, args.versions, HANG),
        "constant": Mode(f"async, buffer {args.buffer}, constant", args.buffer, args.versions,
                         HANG, staleness="constant"),
    }  # fmt: skip
    return [every[name] for name in args.modes]


def slurm(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=check)


def submit(mode: Mode, folder: Path, clients: int) -> str:
    """The mode's array, every task held; its job id."""
    env = dict(os.environ, STORE=str(folder / "store"), RUN="queue", ROUNDS=str(mode.rounds))
    env.update(BUFFER=str(mode.buffer), CLIENTS=str(clients), TASK=TASK, SOMA_THREADS="1")
    env.update(OPTIONS=" ".join(f"{k}={v}" for k, v in OPTIONS.items()))
    env.update(SOMA=f"{sys.executable} -m soma.cli", DEADLINE=str(mode.deadline))
    env.update(EXTRA=" ".join(mode.extra), SOMA_STORE_PATIENCE=str(PATIENCE))
    env.update(STALENESS=mode.staleness)
    name = f"soma-queue-{uuid.uuid4().hex[:6]}"
    sbatch = ["sbatch", "--parsable", "--hold", "-p", PARTITION, "-J", name, "-s", "-t", "40"]
    sbatch += ["--mem-per-cpu=1000", f"--array=0-{clients - 1}", "-o", str(folder / "%A_%a.out")]
    done = subprocess.run([*sbatch, str(ARRAY)], capture_output=True, text=True, env=env,
                          cwd=folder, timeout=60)  # fmt: skip
    job = re.match(r"(\d+)", done.stdout.strip())
    if done.returncode != 0 or job is None:
        raise SystemExit(f"sbatch refused the array: {done.stderr.strip() or done.stdout}")
    return job.group(1)


def alive(job: str) -> list[str]:
    """The array's tasks squeue still shows, with their state (a pending range is one)."""
    shown = slurm("squeue", "-h", "-j", job, "-o", "%i|%T", check=False)
    return [line for line in shown.stdout.splitlines() if "|" in line]


def averages(store: Store, mode: Mode, known: int = 0) -> list[str]:
    """The record digests of each round's average, or each version after the start, in order,
    from the `known`-th on (those before it are known to be there)."""
    if not mode.buffer:
        return [row["average"] for row in status(store, "queue") if row.get("average")][known:]
    digests, v = [], known + 1
    while (digest := store.resolve(layout.published(layout.version("queue", v)))) is not None:
        digests.append(digest)
        v += 1
    return digests


def _when(text: str) -> float:
    """sacct's time (the cluster's local time, no zone: this machine's) in seconds since the
    epoch."""
    return datetime.datetime.fromisoformat(text).timestamp()


def run(mode: Mode, schedule: Schedule, clients: int, folder: Path) -> Outcome:
    """The mode's run under the schedule: released as it says, the pending cancelled once the
    run has its rounds, until every task ended."""
    store = Store(folder / "store")
    started = time.time()
    job = submit(mode, folder, clients)
    slurm("scontrol", "release", *[f"{job}_{k}" for k in range(clients) if k not in schedule.held])
    due = dict(schedule.held)
    finished, gave_up = False, None
    seen: list[tuple[float, str]] = []  # each average's record, and when it was first seen
    while True:
        now = time.time() - started
        if (folder / "store").exists():
            seen += [(now, digest) for digest in averages(store, mode, len(seen))]
        if not finished and len(seen) >= mode.rounds:  # the run has its rounds, or versions
            finished = True
            slurm("scancel", "--state=PENDING", job, check=False)
            due.clear()
        for k, at in list(due.items()):
            if now >= at:
                slurm("scontrol", "release", f"{job}_{k}", check=False)  # cancelled: no matter
                del due[k]
        if not alive(job):
            break
        if now > HANG and not gave_up:
            gave_up = slurm("scancel", job, check=False)
            print(f"{mode.name}: cancelled after {HANG:g} s", file=sys.stderr)
        time.sleep(1)
    seen += [(time.time() - started, digest) for digest in averages(store, mode, len(seen))]
    costs = _accounted(job)
    curve = [(when, _accuracy(store, read_record(store, d)["weights"])) for when, d in seen]
    states = {c.job: c.state for c in costs.values()}
    return Outcome(mode, curve, total(costs.values()), states, finished, _spans(job, started))


def _spans(job: str, started: float) -> list[tuple[float, float, int]]:
    """Each of the array's tasks that started: its start and end, in seconds after
    `started`, and its allocated cores (sacct's Start, End, AllocCPUS)."""
    shown = slurm("sacct", "-X", "-P", "-n", "-j", job, "-o", "Start,End,AllocCPUS").stdout
    spans = []
    for line in shown.splitlines():
        at, _, rest = line.partition("|")
        to, _, cores = rest.partition("|")
        if at[:1].isdigit() and to[:1].isdigit():  # Unknown, None: never started
            spans.append((_when(at) - started, _when(to) - started, int(cores or 0)))
    return spans


def _accounted(job: str) -> dict:
    """The array's tasks as accounting has them, once it has every task that ran ended."""
    for _ in range(60):
        costs = sacct_costs([job])
        if all(c.state not in {"PENDING", "RUNNING", "COMPLETING", ""} for c in costs.values()):
            return costs
        time.sleep(1)
    return costs


@functools.cache
def _task() -> Any:
    return load_task(TASK, OPTIONS)


def _accuracy(store: Store, weights: str) -> float:
    """The test accuracy of `weights` (benchmarks/asynchronous.py's: the task's evaluate)."""
    task = _task()
    nodes = task.nodes(0)
    load(nodes, store.recall_digest(weights))
    return task.evaluate(nodes)["accuracy"]


def header(targets: list[float]) -> str:
    reached = " ".join(f"{f'{t:g}: s (n)':>12} {'core-h':>6}" for t in targets)
    return (
        f"{'mode':<26} {reached} {'end s':>5} {'core-h':>6} {'used h':>6} {'queued':>6} "
        f"{'final':>5} {'best':>5}"
    )


def row(outcome: Outcome, targets: list[float]) -> str:
    """The mode's line: for each target the seconds (rounds or versions) to it and the
    core-hours held until then; the run's end, its core-hours, ..., its final and best."""
    reached = []
    for target in targets:
        seconds, n = first(outcome.curve, target)
        spent = f"{outcome.hours_until(seconds):.4f}" if n else "-"
        reached.append(f"{f'{seconds:.0f} ({n})' if n else 'not reached':>12} {spent:>6}")
    end = f"{outcome.curve[-1][0]:.0f}" if outcome.curve else "-"
    cost = outcome.cost
    share = f"{100 * cost.queue_share:.0f} %" if cost.queue_share is not None else "-"
    final = f"{outcome.curve[-1][1]:.3f}" if outcome.curve else "-"
    best = f"{max(a for _, a in outcome.curve):.3f}" if outcome.curve else "-"
    status_ = "" if outcome.finished else " *"
    return (
        f"{outcome.mode.name + status_:<26} {' '.join(reached)} {end:>5} "
        f"{cost.cpu_hours:>6.4f} {cost.cpu_used_hours:>6.4f} {share:>6} {final:>5} {best:>5}"
    )


def by_time(outcomes: list[Outcome], every: float) -> str:
    """The best accuracy each mode had by each `every` seconds after its submission."""
    end = max((o.curve[-1][0] for o in outcomes if o.curve), default=0.0)
    lines = [f"{'best accuracy by':<26} " + " ".join(f"{f'{t:g} s':>7}" for t in _grid(end, every))]
    for o in outcomes:
        best = [max((a for s, a in o.curve if s <= t), default=None) for t in _grid(end, every)]
        said = " ".join(f"{'-' if b is None else f'{b:.3f}':>7}" for b in best)
        lines.append(f"{o.mode.name:<26} {said}")
    return "\n".join(lines)


def _grid(end: float, every: float) -> list[float]:
    return [every * (i + 1) for i in range(int(end // every) + 1)]


def main(argv: list[str] | None = None) -> list[Outcome]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 held client, fewer rounds")
    parser.add_argument("--modes", default=",".join(MODES), help=f"a comma list of {MODES}")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--held", type=int, default=None, help="clients held (default 2; quick 1)")
    parser.add_argument("--release", type=float, nargs=2, default=None, metavar=("LOW", "HIGH"),
                        help="seconds after submission a held client is released, drawn "
                        "uniformly (default 30 120; quick 15 30)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=None, help="synchronous (default 6; quick 3)")
    parser.add_argument(
        "--versions", type=int, default=None, help="async (default 3000; quick 1000)"
    )
    parser.add_argument("--buffer", type=int, default=2)
    parser.add_argument("--quorum", type=int, default=None, help="default: half the clients")
    parser.add_argument("--deadline", type=float, default=60.0, help="the quorum's, seconds")
    parser.add_argument(
        "--short",
        type=float,
        default=25.0,
        help="the short deadline, seconds (>= 20 + the patience)",
    )
    parser.add_argument("--targets", type=float, nargs="+", default=[0.85, 0.92])
    parser.add_argument("--every", type=float, default=30.0, help="accuracy by time, seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="the results folder (quick: a temporary one)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.held = args.held if args.held is not None else (1 if quick else 2)
    args.release = args.release or ((15.0, 30.0) if quick else (30.0, 120.0))
    args.rounds = args.rounds or (3 if quick else 6)
    args.versions = args.versions or (1000 if quick else 3000)
    args.modes = args.modes.split(",")
    if unknown := set(args.modes) - set(MODES):
        parser.error(f"--modes: {', '.join(sorted(unknown))} not among {', '.join(MODES)}")
    if "SLURM_CONF" not in os.environ and TEST_CONF.is_file():
        os.environ["SLURM_CONF"] = str(TEST_CONF)  # the test cluster's (tests/slurm/cluster.py)
    if slurm("sinfo", "-h", "-p", PARTITION, check=False).returncode != 0:
        raise SystemExit(
            "no Slurm answers here: start the test cluster (bash tests/slurm/start.sh)"
        )
    out = args.out or (tempfile.mkdtemp(prefix="soma-queue-results-") if quick else None)
    schedule = Schedule.drawn(args.seed, args.clients, args.held, *args.release)
    with recorded("slurm_queue", out=out):
        print(
            f"digits ({', '.join(f'{k} {v}' for k, v in OPTIONS.items())}), {args.clients} "
            f"clients as an array's tasks, {args.rounds} rounds or {args.versions} versions; "
            f"seed {args.seed}: {schedule.said()}; the seconds (rounds or versions) and the "
            "core-hours to each target accuracy, then the run's in all"
        )
        print(header(args.targets))
        outcomes = []
        for mode in modes(args):
            with tempfile.TemporaryDirectory(prefix="soma-queue-") as folder:
                print(f"{mode.name}: submitted (load {os.getloadavg()[0]:.2f})", file=sys.stderr)
                outcomes.append(run(mode, schedule, args.clients, Path(folder)))
            print(row(outcomes[-1], args.targets), flush=True)
        for outcome in outcomes:
            states = sorted(set(outcome.states.values()))
            print(f"{outcome.mode.name}: tasks {', '.join(states)}")
        print(by_time(outcomes, args.every))
    return outcomes


if __name__ == "__main__":
    main()
