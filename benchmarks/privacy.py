"""What client-level differential privacy costs on the digits task, at epsilon 1, 4 and 8.

    python benchmarks/privacy.py                      # 10 and 100 clients, 50 rounds
    python benchmarks/privacy.py --clients 100 --epsilons 8 --seeds 1 --no-adaptive
    python benchmarks/privacy.py --json results.json

The federation is `soma.simulate` (benchmarks/federation.py: the bits of `soma client`) with
the task's defaults (softmax, two digits per client: with 100 clients, about 13 training
images each), every client in every round (sampling rate 1: with the noise fixed per round,
fewer clients per round buy amplification by sampling and lose the same in the mean's noise,
z C / m), each round through the strategy seam as the distributed round goes through it.
Rows, per number of clients:

- fedavg: no privacy (the size-weighted mean), with the task's two baselines below it:
  each client alone on its shard, and all the data in one place, each for rounds x epochs
  epochs (at acc@rounds);
- clip only: dp_fedavg with noise_multiplier 0 (clip 1, an infinite epsilon): what clipping
  and the unweighted, fixed-denominator mean cost by themselves;
- eps ~ 8, 4, 1: dp_fedavg, central, clip 1 (the module's default, not tuned; the clients'
  first updates are about 6 long with 10 clients and 0.8 with 100), with the noise
  multiplier z that `soma.privacy.noise_for_epsilon` finds for that epsilon at delta 1e-5
  over --rounds rounds (RDP accountant);
- adaptive eps ~ 8, 4, 1: the same z with adaptive clipping (Andrew et al. 2021: the median
  of the update norms, lr 0.2, from a clip of 1), its count noise max(m / 20, z), so that the
  update's own noise stays within sqrt(4/3) z (it must be more than z / 2).

The noise column is z C / m for a fixed clip; with adaptive clipping it is z_D C_t / m, the
clip C_t moving each round. Each DP row is run with --seeds noise seeds, and its accuracy
given as the mean (min-max). The table gives test accuracy at rounds 10 and --rounds, and
the epsilon spent by round 10 (the noise is calibrated to the whole run, so round 10 has
spent less). Everything runs in this process with one torch thread; each run is
deterministic given its seed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from _measure import recorded  # noqa: E402

from benchmarks import federation  # noqa: E402
from soma import privacy  # noqa: E402
from soma.tasks import digits  # noqa: E402

DELTA = 1e-5
CLIP = 1.0
EARLY = 10


def accuracy_at(history: list[dict[str, float]], round_: int) -> float | None:
    return next((row["accuracy"] for row in history if row["round"] == round_), None)


def federate(
    task: digits.DigitsTask,
    clients: int,
    rounds: int,
    strategy: str,
    options: dict,
    *,
    baselines: bool = False,
) -> dict[str, Any]:
    return federation.simulate(
        task,
        clients,
        rounds,
        every=EARLY,
        baselines=baselines,
        strategy=strategy,
        strategy_options=options,
    )


def row(
    task: digits.DigitsTask,
    clients: int,
    rounds: int,
    *,
    name: str,
    strategy: str,
    options: dict,
    seeds: int,
    z: float | None,
    baselines: bool = False,
) -> dict[str, Any]:
    tic = time.perf_counter()
    runs = []
    for seed in range(seeds if strategy == "dp_fedavg" and (z or 0) > 0 else 1):
        # keyed by the seed so that a row repeats: not private (the epsilon column is the
        # figure the same run would spend with private noise: everyone every round, public)
        reproducible = {"seed": seed, "noise": "reproducible_not_private"}
        given = dict(options, **reproducible) if strategy == "dp_fedavg" else options
        runs.append(federate(task, clients, rounds, strategy, given, baselines=baselines))
    early = [accuracy_at(r["federated"], EARLY) for r in runs]
    late = [accuracy_at(r["federated"], rounds) for r in runs]
    spent = None
    if z is not None:
        spent = {
            "early": privacy.epsilon(z, 1.0, min(EARLY, rounds), DELTA),
            "late": privacy.epsilon(z, 1.0, rounds, DELTA),
        }
    return {
        "name": name,
        "clients": clients,
        "z": z,
        "adaptive": "adaptive" in options,
        "epsilon": spent,
        "early": early,
        "late": late,
        "seconds": time.perf_counter() - tic,
        "baselines": {k: runs[0][k] for k in ("alone", "centralized") if k in runs[0]},
    }


def cell(values: list[float | None]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def eps(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.2f}"


def table(rows: list[dict[str, Any]], rounds: int) -> str:
    head = [
        "clients",
        "run",
        "z",
        "noise on the mean (z C / m)",
        f"eps@{EARLY}",
        f"eps@{rounds}",
        f"acc@{EARLY}",
        f"acc@{rounds}",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * 6) + "|"]
    for r in rows:
        z, spent = r["z"], r["epsilon"]
        if z is None:
            noise = "-"
        elif r["adaptive"]:
            noise = "z_D C_t / m"  # the clip moves, and z_D > z (see the docstring)
        else:
            noise = f"{z * CLIP / r['clients']:.3g}"
        cells = [
            str(r["clients"]),
            r["name"],
            "-" if z is None else f"{z:.3g}",
            noise,
            "-" if spent is None else eps(spent["early"]),
            "-" if spent is None else eps(spent["late"]),
            cell(r["early"]),
            cell(r["late"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
        for kind, accuracy in r["baselines"].items():
            what = "alone (mean over clients)" if kind == "alone" else "centralized (all data)"
            cells = [str(r["clients"]), what, *["-"] * 5, f"{accuracy:.3f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def numbers(text: str, kind: type) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError as error:
        raise SystemExit(f"not a list of {kind.__name__}: {text!r}") from error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="10,100")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--epsilons", default="8,4,1")
    parser.add_argument("--seeds", type=int, default=3, help="noise seeds per DP row")
    parser.add_argument("--no-adaptive", action="store_true", help="skip adaptive clipping")
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args(argv)
    counts = numbers(args.clients, int)
    targets = numbers(args.epsilons, float)
    if args.rounds < EARLY or args.seeds < 1:
        raise SystemExit(f"--rounds must be at least {EARLY} and --seeds at least 1")

    torch.set_num_threads(1)
    start = time.perf_counter()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, {args.rounds} rounds, "
        f"everyone every round, delta {DELTA:g}, clip {CLIP:g}, {args.seeds} noise seeds, "
        f"load average {os.getloadavg()[0]:.1f} (on {os.cpu_count()} cores)"
    )
    multipliers = {e: privacy.noise_for_epsilon(e, DELTA, 1.0, args.rounds) for e in targets}
    print("noise multipliers (RDP, sampling rate 1, over the whole run):")
    for e, z in multipliers.items():
        spends = privacy.epsilon(z, 1.0, args.rounds, DELTA)
        print(f"  eps {e:g}: z = {z:.4f} (spends {spends:.4f})")
    task = digits.make()
    print(f"task: {task}\n", flush=True)
    rows = []
    for clients in counts:
        plan: list[tuple[str, str, dict, float | None]] = [
            ("fedavg", "fedavg", {}, None),
            ("clip only", "dp_fedavg", {"clip": CLIP, "noise_multiplier": 0.0}, 0.0),
        ]
        for e, z in multipliers.items():
            plan.append((f"eps ~ {e:g}", "dp_fedavg", {"clip": CLIP, "noise_multiplier": z}, z))
        if not args.no_adaptive:
            for e, z in multipliers.items():
                adaptive = {"count_noise": max(clients / 20, z)}
                options = {"clip": CLIP, "noise_multiplier": z, "adaptive": adaptive}
                plan.append((f"adaptive eps ~ {e:g}", "dp_fedavg", options, z))
        for name, strategy, options, z in plan:
            done = row(
                task,
                clients,
                args.rounds,
                name=name,
                strategy=strategy,
                options=options,
                seeds=args.seeds,
                z=z,
                baselines=strategy == "fedavg",
            )
            rows.append(done)
            print(
                f"  {clients:>4} clients  {name:<20} acc@{args.rounds} {cell(done['late'])}  "
                f"{done['seconds']:.1f} s",
                flush=True,
            )
    print()
    print(table(rows, args.rounds))
    print(f"\ntotal: {time.perf_counter() - start:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    with recorded("privacy"):  # a run that fails records nothing
        code = main()
    sys.exit(code)
