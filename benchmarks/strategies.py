"""How fast each strategy learns the digits task, and what one Byzantine client does to it.

    python benchmarks/strategies.py                        # all strategies, both settings
    python benchmarks/strategies.py --rounds 20 --strategies fedavg,scaffold --settings defaults
    python benchmarks/strategies.py --no-robustness --json results.json

The federation is `soma.simulate` (benchmarks/federation.py: the bits of `soma client`): 10
clients holding two digits each (the task's `labels_per_client` partition), every client in
every round, each round through the strategy seam exactly as the distributed round goes
through it. Every strategy runs with its module's defaults (printed below the header):
nothing here is tuned, and above all nothing is tuned on the test accuracy this prints. Two
settings of the local training:

- defaults:  the task's defaults (softmax, scale standard, lr 0.1, momentum 0.9, epochs 2,
             batch 16), tuned for FedAvg in the workflow's 10-round run;
- plain-sgd: momentum 0, inputs /16 (scale unit), epochs 5, batch 10, lr 0.1: the local
             training of McMahan et al.'s experiments, slower per round.

Per setting, a table of test accuracy after rounds 1, 5, 10, 20 and 50 (those <= --rounds),
the first round whose test accuracy reaches --target (0.95; "-" if none does), the last
round's test loss, and the wall seconds of the run (training, aggregation and one
evaluation per round); the centralized baseline (all the training data in one place from
the same start, for rounds x epochs epochs: as many example-gradients as the federation's);
and a line naming the strategy that reached the target in the fewest rounds, with its
rounds against FedAvg's measured in the same run.

Then robustness: client 0 sends garbage from round 1 on (`benchmarks.faulty.attacked`: its weights
times -10, `sign_flip:10`, or times 100, `scale:100`) to FedAvg and the robust strategies
(median, trimmed_mean, krum), and the table gives test accuracy at rounds 10 and 20 beside
the same strategy without the attack (the clean run is the table's own, reused: a run's
first 20 rounds do not depend on how many follow). Only the strategies chosen with
--strategies are attacked.

Why a loop and not a study (`study:` in a config, README.md "Studies"): this measures each
strategy's own seconds (training, aggregation, evaluation) in one process, which a DAG of
jobs would drown in interpreter starts and torch imports (10 strategies x 2 settings x 50
rounds is a thousand round jobs); and its Byzantine client is a wrapped task
(`benchmarks.faulty`), not a config key. The accuracy comparison over seeds, in the
workflow, is the study config/study.yaml (`snakemake --cores 2 --configfile config/study.yaml`).

Everything runs in this process with one torch thread (`torch.set_num_threads(1)`); each
run is deterministic, so only the seconds change from one run to the next.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
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
from soma.strategies import BUILTIN, module_of  # noqa: E402
from soma.tasks import digits  # noqa: E402

STRATEGIES = (
    "fedavg",
    "fedavgm",
    "fedadam",
    "fedyogi",
    "fedadagrad",
    "fedprox",
    "scaffold",
    "median",
    "trimmed_mean",
    "krum",
)
SETTINGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "plain-sgd": {"momentum": 0.0, "scale": "unit", "epochs": 5, "batch_size": 10, "lr": 0.1},
}
CHECKPOINTS = (1, 5, 10, 20, 50)
ROBUST = ("fedavg", "median", "trimmed_mean", "krum")
ATTACKS: tuple[federation.Attack, ...] = (("sign_flip", 10.0), ("scale", 100.0))
ROBUST_CHECKPOINTS = (10, 20)
CLIENTS = 10


def defaults_of(strategy: str) -> str:
    """The options `make()` takes when given none, read from its signature: what was run."""
    import importlib

    make = importlib.import_module(module_of(strategy)).make
    shown = [
        f"{name}={parameter.default!r}"
        for name, parameter in inspect.signature(make).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    ]
    return f"{strategy}({', '.join(shown)})"


def first_reaching(history: Sequence[dict[str, float]], target: float) -> int | None:
    """The first round whose test accuracy is at least `target`, or None."""
    return next((int(row["round"]) for row in history if row["accuracy"] >= target), None)


def accuracy_at(history: Sequence[dict[str, float]], round_: int) -> float | None:
    return next((row["accuracy"] for row in history if row["round"] == round_), None)


def run(
    task: digits.DigitsTask,
    strategy: str,
    rounds: int,
    *,
    seed: int,
    attack: federation.Attack | None = None,
) -> dict[str, Any]:
    """One federation, timed; every round evaluated, the final weights dropped."""
    tic = time.perf_counter()
    result = federation.simulate(
        task, CLIENTS, rounds, seed=seed, every=1, baselines=False, strategy=strategy, attack=attack
    )
    seconds = time.perf_counter() - tic
    return {
        "strategy": strategy,
        "attack": attack,
        "history": result["federated"],
        "seconds": seconds,
        "round_seconds": result["round_seconds"],
    }


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def setting_table(rows: list[dict[str, Any]], rounds: int, target: float) -> str:
    checkpoints = [c for c in CHECKPOINTS if c <= rounds]
    head = ["strategy", *(f"acc@{c}" for c in checkpoints), f"round to {target:g}"]
    head += [f"loss@{rounds}", "seconds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1))]
    lines[-1] += "|"
    for row in rows:
        history = row["history"]
        reached = first_reaching(history, target)
        loss = history[-1]["loss"]
        cells = [row["strategy"], *(fmt(accuracy_at(history, c)) for c in checkpoints)]
        cells += ["-" if reached is None else str(reached)]
        cells += ["nan" if math.isnan(loss) else f"{loss:.3f}", f"{row['seconds']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fastest_line(rows: list[dict[str, Any]], rounds: int, target: float) -> str:
    """The strategy (or strategies, tied) first to the target, against FedAvg's rounds."""
    reached = {
        row["strategy"]: first_reaching(row["history"], target)
        for row in rows
        if first_reaching(row["history"], target) is not None
    }
    if not reached:
        return f"fastest to {target:g}: none of the strategies reached it in {rounds} rounds"
    best = min(reached.values())
    names = ", ".join(name for name, r in reached.items() if r == best)
    line = f"fastest to {target:g}: {names} in {best} rounds"
    ran_fedavg = any(row["strategy"] == "fedavg" for row in rows)
    if not ran_fedavg:
        return line + " (fedavg was not run, so no ratio)"
    fedavg_rounds = reached.get("fedavg")
    if fedavg_rounds is None:
        return line + f"; fedavg did not reach it in {rounds} rounds (ratio < {best / rounds:.2f})"
    return (
        line + f"; fedavg in {fedavg_rounds}: {best / fedavg_rounds:.2f}x fedavg's rounds "
        f"({fedavg_rounds / best:.2f}x fewer)"
    )


def robustness_table(rows: list[dict[str, Any]]) -> str:
    head = ["setting", "strategy", "attack"]
    for c in ROBUST_CHECKPOINTS:
        head += [f"acc@{c} attacked", f"acc@{c} clean"]
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)),
    ]
    lines[-1] += "|"
    for row in rows:
        kind, factor = row["attack"]
        cells = [row["setting"], row["strategy"], f"{kind} {factor:g}"]
        for c in ROBUST_CHECKPOINTS:
            cells += [fmt(accuracy_at(row["history"], c)), fmt(accuracy_at(row["clean"], c))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chosen(text: str, known: Sequence[str], what: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise SystemExit(f"unknown {what} {unknown or text!r}: choose from {', '.join(known)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--target", type=float, default=0.95, help="test accuracy to reach")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-robustness", action="store_true", help="skip the attacks")
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args(argv)
    strategies = chosen(args.strategies, sorted(BUILTIN), "strategies")
    settings = chosen(args.settings, list(SETTINGS), "settings")
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")

    torch.set_num_threads(1)
    start = time.perf_counter()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, {CLIENTS} clients, "
        f"{args.rounds} rounds, seed {args.seed}, load average {os.getloadavg()[0]:.1f} "
        f"(on {os.cpu_count()} cores)"
    )
    print("strategy defaults (module defaults, untuned):")
    for strategy in strategies:
        print(f"  {defaults_of(strategy)}")
    raw: dict[str, Any] = {"settings": {}, "robustness": []}
    clean: dict[tuple[str, str], list[dict[str, float]]] = {}
    for setting in settings:
        task = digits.make(**SETTINGS[setting])
        print(f"\n## {setting}: {task}\n", flush=True)
        tic = time.perf_counter()
        central = digits.centralized(task, args.rounds, seed=args.seed)
        central_seconds = time.perf_counter() - tic
        rows = []
        for strategy in strategies:
            row = run(task, strategy, args.rounds, seed=args.seed)
            rows.append(row)
            clean[setting, strategy] = row["history"]
            print(
                f"  {strategy:<12} acc@{args.rounds} {row['history'][-1]['accuracy']:.3f}  "
                f"{row['seconds']:.1f} s",
                flush=True,
            )
        print()
        print(setting_table(rows, args.rounds, args.target))
        print()
        print(
            f"centralized baseline ({args.rounds} x {task.epochs} = {args.rounds * task.epochs} "
            f"epochs on all the training data): {central:.3f} ({central_seconds:.1f} s)"
        )
        print(fastest_line(rows, args.rounds, args.target), flush=True)
        raw["settings"][setting] = {"task": SETTINGS[setting], "centralized": central, "runs": rows}

    attacked = [s for s in ROBUST if s in strategies]
    if not args.no_robustness and attacked:
        rounds = max(ROBUST_CHECKPOINTS)
        print(f"\n## robustness: client 0 of {CLIENTS} sends garbage from round 1\n", flush=True)
        rows = []
        for setting in settings:
            task = digits.make(**SETTINGS[setting])
            for strategy in attacked:
                history = clean[setting, strategy]
                if len(history) < rounds:  # --rounds below 20: run the clean one long enough
                    history = run(task, strategy, rounds, seed=args.seed)["history"]
                for attack in ATTACKS:
                    row = run(task, strategy, rounds, seed=args.seed, attack=attack)
                    row.update(setting=setting, clean=history)
                    rows.append(row)
                    print(
                        f"  {setting:<10} {strategy:<12} {attack[0]} {attack[1]:g}  "
                        f"acc@{rounds} {row['history'][-1]['accuracy']:.3f}  "
                        f"{row['seconds']:.1f} s",
                        flush=True,
                    )
        print()
        print(robustness_table(rows))
        raw["robustness"] = rows
    print(f"\ntotal: {time.perf_counter() - start:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    with recorded("strategies"):  # a run that fails records nothing
        code = main()
    sys.exit(code)
