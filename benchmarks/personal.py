"""Personal output layer (FedPer) against FedAvg on digits with two labels per client.

    python benchmarks/personal.py [--rounds 20] [--seeds 0,1,2] [--clients 10]

Each client of the digits task (mlp model, `labels_per_client: 2`, the task's defaults
otherwise) holds out a fifth of its own shard (seeded, stratified by nothing: a random
fifth) and trains on the rest. After the last round each client's local accuracy is its
model's accuracy on its own held-out fifth:

- fedavg:           the last average (every node averaged);
- fedavg, personal: the last average's shared nodes (`hidden`) with the client's own `out`
                    (`personal: [out]`, soma.run.personal), as it kept it in the store;
- alone:            the client trained on its own shard alone for as many rounds.

The table gives, over the seeds, the mean over clients of the local accuracy (weighted by
held-out size), its worst client, and the central test accuracy of the average (for the
personal run, the shared nodes with each client's own head, averaged over clients: the
test set has all ten digits, a two-digit head cannot read them). Nothing is tuned.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soma.config.spec import RunSpec  # noqa: E402
from soma.nodes import export, load  # noqa: E402
from soma.round.once import read_record  # noqa: E402
from soma.run import checked
from soma.run.drive import drive  # noqa: E402
from soma.run.personal import nodes_of_client  # noqa: E402
from soma.run.simulate import store_at  # noqa: E402
from soma.tasks.digits import DigitsTask  # noqa: E402
from soma.training import trained_alone  # noqa: E402

HELD_OUT = 0.2
OPTIONS = {"model": "mlp", "partition": "labels_per_client", "labels_per_client": 2}


class HeldOutDigits(DigitsTask):
    """Digits whose shards keep back a seeded fifth of each client's examples."""

    def _halves(self, client: int, clients: int):
        inputs, labels = super().shard(client, clients)
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(client))
        cut = int(round(len(labels) * HELD_OUT))
        kept, held = order[cut:], order[:cut]
        return (inputs[kept], labels[kept]), (inputs[held], labels[held])

    def shard(self, client: int, clients: int):
        return self._halves(client, clients)[0]

    def held_out(self, client: int, clients: int):
        return self._halves(client, clients)[1]


def make(**options) -> HeldOutDigits:
    return HeldOutDigits(**options)


def accuracy(nodes, data) -> tuple[float, int]:
    inputs, labels = data
    with torch.no_grad():
        x = inputs
        for node in nodes.values():
            x = node(x)
    return float((x.argmax(dim=1) == labels).double().mean()), len(labels)


def central(task, nodes) -> float:
    return task.evaluate(nodes)["accuracy"]


def run(seed: int, rounds: int, clients: int, personal: tuple[str, ...]) -> dict[str, float]:
    spec = RunSpec(
        run="personal" if personal else "fedavg",
        task="personal",
        clients=clients,
        rounds=rounds,
        task_options=OPTIONS,
        seed=seed,
        personal=personal,
        mine=tuple(range(clients)),
        given="library",
    )
    task, strategy = checked.checked(spec)
    with store_at(None) as store:
        driven = drive(spec, store, task, strategy)
        weights = store.recall_digest(driven.weights)
        locals_, centrals = [], []
        last = driven.rounds[-1].record
        owns = {
            i["client"]: store.recall_digest(read_record(store, i["record"])["own"])
            if personal
            else None
            for i in last["inputs"]
        }
        for k in range(clients):
            nodes = nodes_of_client(task, seed, weights, owns.get(k), personal)
            locals_.append(accuracy(nodes, task.held_out(k, clients)))
            centrals.append(central(task, nodes))
    total = sum(n for _, n in locals_)
    return {
        "local": sum(a * n for a, n in locals_) / total,
        "worst": min(a for a, _ in locals_),
        "central": statistics.fmean(centrals),
    }


def alone(seed: int, rounds: int, clients: int) -> dict[str, float]:
    task = make(**OPTIONS)
    start = export(task.nodes(seed))
    locals_, centrals = [], []
    for k in range(clients):
        nodes = task.nodes(seed)
        load(nodes, start)
        data = task.shard(k, clients)
        for _ in trained_alone(task, nodes, data, rounds=rounds, seed=seed, client=k):
            pass
        locals_.append(accuracy(nodes, task.held_out(k, clients)))
        centrals.append(central(task, nodes))
    total = sum(n for _, n in locals_)
    return {
        "local": sum(a * n for a, n in locals_) / total,
        "worst": min(a for a, _ in locals_),
        "central": statistics.fmean(centrals),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = {
        "fedavg": lambda s: run(s, args.rounds, args.clients, ()),
        "fedavg, personal out": lambda s: run(s, args.rounds, args.clients, ("out",)),
        "alone": lambda s: alone(s, args.rounds, args.clients),
    }
    print(
        f"digits, mlp, {args.clients} clients x 2 labels, {args.rounds} rounds, "
        f"seeds {seeds}; local = own held-out fifth"
    )
    print("| run | local accuracy | worst client | central test accuracy | seconds |")
    print("| --- | --- | --- | --- | --- |")
    for name, one in rows.items():
        tic = time.perf_counter()
        results = [one(s) for s in seeds]
        seconds = (time.perf_counter() - tic) / len(seeds)

        def cell(key: str, results: list = results) -> str:
            values = [r[key] for r in results]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            return f"{statistics.fmean(values):.3f} ± {spread:.3f}"

        print(f"| {name} | {cell('local')} | {cell('worst')} | {cell('central')} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
