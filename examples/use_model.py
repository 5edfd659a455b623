# use_model.py: a digits model file used outside soma, with torch, safetensors and
# scikit-learn's digits only (no soma import):
#
#     python examples/use_model.py results/digits/model.safetensors
#
# The file holds the weights, named `<node>.<key>` as torch.nn.ModuleDict names them, and in
# its metadata what the model is (`nodes`: each node, in order) and what its inputs must be
# made of (`preprocessing.*`: the digits task's pixels / 16, standardized by the training
# split's per-pixel mean and std). Fed raw pixels instead, the model scores far less.
import json
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file

# The digits task's nodes (its `softmax` and `mlp` models), rebuilt from their weights.
LAYERS = {
    "Linear": lambda w: torch.nn.Linear(w["weight"].shape[1], w["weight"].shape[0]),
    "ReLU": lambda w: torch.nn.ReLU(),
}


def load(path):
    """The model (its nodes applied in order, as the digits task does) and its metadata."""
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(path)
    nodes = {}
    for name, shown in json.loads(metadata["nodes"]).items():
        own = {k[len(name) + 1 :]: t for k, t in tensors.items() if k.startswith(name + ".")}
        nodes[name] = LAYERS[shown.split("(")[0]](own)
        nodes[name].load_state_dict(own)
    return torch.nn.Sequential(*nodes.values()).eval(), metadata


def prepare(pixels, metadata):
    """The inputs as the model was trained on them (the metadata's `preprocessing.*`)."""
    x = np.asarray(pixels, dtype=np.float64) / 16.0
    if metadata["preprocessing.formula"].startswith("(x / 16 - mean) / std"):
        mean = np.array(json.loads(metadata["preprocessing.mean"]))
        std = np.array(json.loads(metadata["preprocessing.std"]))
        x = (x - mean) / std
    elif metadata["preprocessing.formula"] != "x / 16":
        raise SystemExit(f"unknown preprocessing: {metadata['preprocessing.formula']}")
    return torch.tensor(x, dtype=torch.float32)


def accuracy(model, inputs, labels):
    with torch.no_grad():
        predicted = model(inputs).argmax(dim=1)
    return float((predicted == torch.as_tensor(labels)).double().mean())


def score(path, pixels, labels, *, raw=False):
    """The model's accuracy on `pixels` (0..16) and `labels`; `raw`: fed the pixels as they
    are, without the preprocessing its metadata asks for."""
    model, metadata = load(path)
    inputs = torch.tensor(np.asarray(pixels), dtype=torch.float32)
    return accuracy(model, inputs if raw else prepare(pixels, metadata), labels)


if __name__ == "__main__":
    from sklearn.datasets import load_digits

    pixels, labels = load_digits(return_X_y=True)
    prepared, raw = (score(sys.argv[1], pixels, labels, raw=r) for r in (False, True))
    print(f"accuracy on the {len(labels)} digits: {prepared:.4f} (raw pixels: {raw:.4f})")
