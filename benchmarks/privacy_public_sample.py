"""What the honest accounting costs: the epsilon reported before and after, and the accuracy
on the digits task with 100 clients at the epsilon the old accountant reported.

    python benchmarks/privacy_public_sample.py            # the table, and 2 runs per row
    python benchmarks/privacy_public_sample.py --seeds 0  # the table only

Before, each round was accounted as a Poisson sample at rate m / n, secret from the reader;
but soma draws the sample by hash from the run's seed and writes it in every round record,
so against whoever reads the store the worst-placed client's rounds compose with no
amplification (soma.privacy.epsilon_public). The accuracy rows: 100 clients, 10 a round,
50 rounds, central, clip 1, the noise keyed by a seed per run (reproducible, so not private:
these rows measure accuracy only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from soma import privacy, simulate  # noqa: E402
from soma.config.participation import sampled  # noqa: E402

DELTA = 1e-5


def worst_placed(clients: int, count: int, rounds: int, seed: int = 0) -> int:
    taken = [0] * clients
    for r in range(rounds):
        for k in sampled(seed, r, clients, count):
            taken[k] += 1
    return max(taken)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=2, help="noise seeds per accuracy row")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        "| setting | before (secret Poisson) | after (public, worst-placed) | z for before's eps |"
    )
    print("| --- | --- | --- | --- |")
    for z, m, n, rounds in [(1.0, 10, 100, 50), (0.8, 50, 1000, 200)]:
        k = worst_placed(n, m, rounds)
        before = privacy.epsilon(z, m / n, rounds, DELTA)
        after = privacy.epsilon_public(privacy.exposure(z, k), DELTA)
        z_same = privacy.noise_for_epsilon(before, DELTA, 1.0, k)
        print(
            f"| z {z}, {m} of {n}, {rounds} rounds | {before:.2f} | {after:.2f} ({k} rounds) "
            f"| {z_same:.2f} |"
        )
    if args.seeds < 1:
        return
    k = worst_placed(100, 10, 50)
    before = privacy.epsilon(1.0, 0.1, 50, DELTA)
    z_same = privacy.noise_for_epsilon(before, DELTA, 1.0, k)
    for name, z in [("clip only", 0.0), ("z 1.0", 1.0), (f"z {z_same:.2f}", z_same)]:
        accuracies = []
        for seed in range(args.seeds):
            options = {"clip": 1.0, "noise_multiplier": z, "clients_per_round": 10}
            options.update(noise="reproducible_not_private", seed=seed)
            run = simulate(
                "soma.tasks.digits",
                clients=100,
                rounds=50,
                participation=10,
                strategy="dp_fedavg",
                strategy_options=options,
            )
            accuracies.append(run.evaluation["accuracy"])
        spent = privacy.epsilon_public(privacy.exposure(z, k), DELTA)
        mean = sum(accuracies) / len(accuracies)
        print(f"{name}: accuracy {mean:.3f} {accuracies}, epsilon against the store {spent:.2f}")


if __name__ == "__main__":
    main()
