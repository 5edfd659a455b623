"""What partial participation and a lost client per round cost FedAvg on the digits task.

    python benchmarks/participation.py                 # 50 rounds, the three runs
    python benchmarks/participation.py --rounds 20 --json results.json

The federation is `soma.simulate` (benchmarks/federation.py: the bits of `soma client`) with
the task's defaults (10 clients holding two digits each, softmax, lr 0.1, momentum 0.9, 2
epochs, batch 16) and FedAvg, in three runs that differ only in who takes part:

- full:          every client, every round (the workflow's default);
- 50%:           `participation=0.5`: 5 of the 10 clients per round, drawn by
                 `soma.config.participation.sampled(seed, round_index, 10, 0.5)`, the very draw the
                 distributed run makes, so this is what a Slurm run with that setting learns;
- drop one, q0.8: everyone sampled, but one client is killed every round (the one at
                 `round_index % 10`, `federation.drop_one_per_round`: its training raises
                 and the client step drops it), the round averaging the
                 9 that came, which a quorum of 0.8 (8 of 10) allows.

Nothing is tuned, least of all on the test accuracy printed. The table gives test accuracy
after rounds 1, 5, 10, 20 and 50 (those <= --rounds), the first round whose test accuracy
reaches --target (0.95; "-" if none does), how many client trainings the run paid for
(rounds x clients who took part: partial participation is cheaper per round, which is its
point), and the wall seconds of the run (training, aggregation and one evaluation per round).
Then the centralized baseline once: all the training data in one place from the same start,
for rounds x epochs epochs.

Everything runs in this process with one torch thread (`torch.set_num_threads(1)`); each run
is deterministic, so only the seconds change from one run to the next.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from _measure import recorded  # noqa: E402

from benchmarks import federation  # noqa: E402
from soma.tasks import digits  # noqa: E402

CLIENTS = 10
STRATEGY = "fedavg"
CHECKPOINTS = (1, 5, 10, 20, 50)
RUNS: dict[str, dict[str, Any]] = {
    "full": {},
    "50%": {"participation": 0.5},
    "drop one, q0.8": {"dropouts": federation.drop_one_per_round, "quorum": 0.8},
}


def first_reaching(history: Sequence[dict[str, float]], target: float) -> int | None:
    """The first round whose test accuracy is at least `target`, or None."""
    return next((int(row["round"]) for row in history if row["accuracy"] >= target), None)


def accuracy_at(history: Sequence[dict[str, float]], round_: int) -> float | None:
    return next((row["accuracy"] for row in history if row["round"] == round_), None)


def run(
    task: digits.DigitsTask, name: str, rounds: int, *, seed: int, target: float
) -> dict[str, Any]:
    """One federation, timed; every round evaluated (for the first round reaching `target`),
    the final weights dropped."""
    tic = time.perf_counter()
    result = federation.simulate(
        task,
        CLIENTS,
        rounds,
        seed=seed,
        every=1,
        baselines=False,
        strategy=STRATEGY,
        **RUNS[name],
    )
    seconds = time.perf_counter() - tic
    participants = result["participants"]
    return {
        "run": name,
        "history": result["federated"],
        "reached": first_reaching(result["federated"], target),
        "trainings": sum(len(came) for came in participants),
        "participants": participants,
        "seconds": seconds,
    }


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(rows: list[dict[str, Any]], rounds: int, target: float) -> str:
    checkpoints = [c for c in CHECKPOINTS if c <= rounds]
    head = ["run", *(f"acc@{c}" for c in checkpoints), f"round to {target:g}"]
    head += ["trainings", "seconds"]
    lines = ["| " + " | ".join(head) + " |"]
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for row in rows:
        cells = [row["run"], *(fmt(accuracy_at(row["history"], c)) for c in checkpoints)]
        cells += ["-" if row["reached"] is None else str(row["reached"])]
        cells += [str(row["trainings"]), f"{row['seconds']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--target", type=float, default=0.95, help="test accuracy to reach")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")

    torch.set_num_threads(1)
    logging.getLogger("soma.client").setLevel(logging.ERROR)  # the drops are the point
    start = time.perf_counter()
    task = digits.make()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, {CLIENTS} clients, "
        f"{args.rounds} rounds, seed {args.seed}, strategy {STRATEGY}, load average "
        f"{os.getloadavg()[0]:.1f} (on {os.cpu_count()} cores)"
    )
    print(f"task: {task}\n", flush=True)
    rows = []
    for name in RUNS:
        row = run(task, name, args.rounds, seed=args.seed, target=args.target)
        rows.append(row)
        print(
            f"  {name:<15} acc@{args.rounds} {row['history'][-1]['accuracy']:.3f}  "
            f"{row['seconds']:.1f} s",
            flush=True,
        )
    print()
    print(table(rows, args.rounds, args.target))
    print()
    tic = time.perf_counter()
    central = digits.centralized(task, args.rounds, seed=args.seed)
    print(
        f"centralized baseline ({args.rounds} x {task.epochs} = {args.rounds * task.epochs} "
        f"epochs on all the training data): {central:.3f} ({time.perf_counter() - tic:.1f} s)"
    )
    print(f"\ntotal: {time.perf_counter() - start:.1f} s")
    if args.json:
        raw = {"task": str(task), "centralized": central, "runs": rows}
        Path(args.json).write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    with recorded("participation"):  # a run that fails records nothing
        code = main()
    sys.exit(code)
