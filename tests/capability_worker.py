"""The server's arithmetic on fixed inputs, as digests, under whatever CPU capability torch
was started with (`ATEN_CPU_CAPABILITY`): tests/test_capabilities.py runs this under each
capability the machine has and compares. Applies SOMA_MUTANT like the test process does.

The inputs are made by numpy from a seed (torch's own random draws differ by capability),
so every run of this script averages the same bits. Printed: one JSON object, the
capability torch ran under and {case: digest of the result's tensors}, and a control
(`torch.lerp` of the same inputs) that shows the capabilities really round differently.

Usage: python tests/capability_worker.py STORE_FOLDER
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import mutants  # noqa: E402

mutants.apply_from_environment()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import soma  # noqa: E402
from soma.asynchronous.arithmetic import Consumed, server_step  # noqa: E402
from soma.round import tree  # noqa: E402
from soma.round.meeting import Input  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.strategies import Update, at_round, load_strategy  # noqa: E402

CLIENTS = 6
SIZES = [120, 7, 33, 250, 64, 91]
SHAPES = {"layer": {"weight": (64, 257), "bias": (257,)}, "head": {"weight": (1000,)}}


def _export(rng: np.random.Generator, scale: float = 1.0) -> dict:
    out: dict = {}
    for node, keys in SHAPES.items():
        out[node] = {
            key: torch.from_numpy((rng.standard_normal(shape) * scale).astype(np.float32))
            for key, shape in keys.items()
        }
    out["norm"] = {"num_batches_tracked": torch.tensor(rng.integers(0, 100), dtype=torch.int64)}
    return out


def digest(value: object) -> str:
    """The bits of every tensor of a nested map, in sorted key order."""
    h = hashlib.sha256()

    def walk(v: object, at: str) -> None:
        if isinstance(v, dict):
            for k in sorted(v):
                walk(v[k], f"{at}/{k}")
        elif isinstance(v, torch.Tensor):
            h.update(f"{at}:{v.dtype}:{tuple(v.shape)}".encode())
            h.update(v.detach().contiguous().numpy().tobytes())
        else:
            h.update(f"{at}={v!r}".encode())

    walk(value, "")
    return h.hexdigest()


# Every built-in strategy, with options that reach its arithmetic (a norm bound, buckets,
# server learning rates that are not 1, reproducible noise for DP-FedAvg).
STRATEGIES = {
    "fedavg": {},
    "fedavg+norm_bound": {"norm_bound": 1.5},
    "fedavgm": {"server_lr": 0.7, "momentum": 0.9},
    "fedadam": {"bias_correction": True},
    "fedyogi": {},
    "fedadagrad": {},
    "fedprox": {"mu": 0.1},
    "scaffold": {"server_lr": 0.8},
    "krum": {"f": 1, "m": 2},
    "krum+bucket": {"f": 0, "m": 1, "bucket": 2},
    "median": {},
    "median+bucket": {"bucket": 2},
    "trimmed_mean": {"beta": 0.2},
    "centered_clip": {"tau": 0.5, "iterations": 2},
    "dp_fedavg": {"clip": 2.0, "noise_multiplier": 0.5, "noise": "reproducible_not_private"},
}


def main(folder: str) -> None:
    rng = np.random.default_rng(20261206)
    previous = _export(rng)
    trained = [
        {
            n: {k: (t + d[n][k] if t.is_floating_point() else d[n][k]) for k, t in keys.items()}
            for n, keys in previous.items()
        }
        for d in (_export(rng, 0.05 * (i + 1)) for i in range(CLIENTS))
    ]
    extras = [
        {n: {k: t for k, t in keys.items() if t.is_floating_point()} for n, keys in d.items()}
        for d in (_export(rng, 0.01) for _ in range(CLIENTS))
    ]
    found: dict[str, str] = {}
    found["soma.fedavg list"] = digest(soma.fedavg(trained, SIZES))
    found["soma.fedavg iterator"] = digest(
        soma.fedavg(iter(list(zip(trained, SIZES, strict=True))))
    )
    for case, options in STRATEGIES.items():
        name = case.split("+")[0]
        strategy = at_round(load_strategy(name, options), round=3, seed=7)
        state = None
        for step in range(2):  # twice: the second from the state the first left
            updates = [
                Update(client=i, size=SIZES[i], weights=trained[i], extra=extras[i])
                for i in range(CLIENTS)
            ]
            weights, state = strategy.aggregate(previous, iter(updates), state, clients=CLIENTS)
            found[f"{case} step {step}"] = digest({"weights": weights, "state": state or {}})
    store = Store(folder)
    inputs = [Input(i, store.put_value(trained[i]), float(SIZES[i])) for i in range(CLIENTS)]
    root = tree.recompute(store, tree.leaves_of(inputs), 2)
    found["tree fan-in 2"] = digest(store.recall_digest(root.mean))
    found["tree fan-in 4, read only"] = digest(tree.mean_of(store, tree.leaves_of(inputs), 4))
    points = [
        Consumed(trained[0], None, SIZES[0], 1.0),
        Consumed(trained[1], trained[2], SIZES[1], 0.5),
        Consumed(trained[3], previous, SIZES[3], 0.25),
    ]
    found["asynchronous version"] = digest(server_step(previous, points, 0.9))
    a, b = previous["layer"]["weight"], trained[0]["layer"]["weight"]
    control = digest({"lerp": torch.lerp(a, b, 0.3), "alpha": torch.add(a, b, alpha=0.3)})
    print(
        json.dumps(
            {
                "capability": torch.backends.cpu.get_cpu_capability(),
                "digests": found,
                "control": control,
            }
        )
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1])
