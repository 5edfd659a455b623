"""The trained model as one plain file: a safetensors file that plain PyTorch loads.

A run's weights live in the store, named by digest, which is right for the rounds and no
use to whoever wants the model afterwards. `save_model` writes an export as an ordinary
safetensors file whose tensor names are `f"{node_id}.{key}"`, exactly how
`torch.nn.ModuleDict(nodes).state_dict()` names them, so that

    torch.nn.ModuleDict(task.nodes(0)).load_state_dict(safetensors.torch.load_file(path))

loads it with nothing of soma installed. The file's `__metadata__` (text to text) says the
rest:

    format     "soma.model/1"
    tensors    JSON: [[node, key], ...], the exact pairs in the export's order (a node or a
               key may hold a dot, so a name alone cannot always be split back)
    run, round, weights, strategy
               where the weights came from (the weights' digest in the store that held them);
               text as given, anything else JSON-encoded (the round is "3")
    task, task_options
               what the model is: the run's task (its import path) and options (JSON), read
               from the meeting of the average (its `about` record, checked to hash to the
               meeting's key)
    nodes      JSON: {node: repr(module)}, in the task's order (`task.nodes(seed)`)
    base       the digest of the task's frozen base (soma.run.base), for a run that has
               one: its tensors are in the file too, beside the trained nodes' (the base's
               names and the nodes' are the task's to choose: soma.tasks.adapters names the
               base by the model's own names and the adapters by peft's, so that peft or
               plain PyTorch loads the file)
    preprocessing.<key>
               what the task says its inputs must be made of (its optional
               `preprocessing()`, soma.tasks): the digits task's formula, mean and std

A file used outside soma needs its inputs prepared as in training: `nodes` and
`preprocessing.*` say how (examples/use_model.py scores digits with torch alone). The task is
made (imported) to say them only when it is one of soma's own (`soma.tasks.*`) or the one the
caller vouches for (the workflow's jobs: their config's), never merely because the store names
it: reading a store runs no code of its choosing (as its strategies: soma.round.verify).

`load_model` rebuilds `{node: {key: tensor}}` from those pairs. Two pairs that would make
one name (`("a.b", "c")` and `("a", "b.c")`) are refused, naming both, before anything is
written. The file is written like everything soma writes: a temporary beside it, fsync,
rename, so a killed writer never leaves a partial file under the final name.

The bytes are laid out by `soma.store.tensorfile` (sorted header, no timestamps): the same weights
and provenance give the same file, so Snakemake sees an unchanged model as unchanged, and
the tensors are streamed from their own memory (a model recalled from the store is written
without a copy of it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from soma.errors import SomaError
from soma.files import write_atomic
from soma.nodes import Export
from soma.store import tensorfile
from soma.store.errors import StoreError

if TYPE_CHECKING:
    from soma.round.records import AverageRecord
    from soma.store import Store

LOG = logging.getLogger("soma.model")

FORMAT = "soma.model/1"
RESERVED = ("format", "tensors")

__all__ = [
    "FORMAT",
    "ModelError",
    "averages",
    "choose_average",
    "described",
    "export_average",
    "export_best",
    "export_receipt",
    "load_model",
    "provenance",
    "read_metadata",
    "save_model",
    "tensor_names",
    "with_base",
]


class ModelError(SomaError, ValueError):
    """A model file that cannot be written or read as asked; the message names the culprit."""


def tensor_names(export: Export) -> dict[str, tuple[str, str]]:
    """Each tensor's name in the file, `f"{node}.{key}"`, and the (node, key) it holds.

    Refuses, naming both pairs, two pairs that make one name.
    """
    names: dict[str, tuple[str, str]] = {}
    for node_id, keys in export.items():
        if not isinstance(node_id, str) or not isinstance(keys, Mapping):
            raise ModelError(f"node {node_id!r} is not text naming a map of tensors")
        for key, tensor in keys.items():
            if not isinstance(key, str):
                raise ModelError(f"node {node_id!r}: key {key!r} is not text")
            if not isinstance(tensor, torch.Tensor):
                raise ModelError(
                    f"node {node_id!r} key {key!r} is a {type(tensor).__name__}, not a tensor"
                )
            problem = tensorfile.tensor_problem(tensor)
            if problem:
                raise ModelError(f"node {node_id!r} key {key!r} is {problem}")
            name = f"{node_id}.{key}"
            if name in names:
                other = names[name]
                raise ModelError(
                    f"node {other[0]!r} key {other[1]!r} and node {node_id!r} key {key!r} "
                    f"would both be the tensor {name!r}; rename one of them"
                )
            names[name] = (node_id, key)
    return names


def _metadata_text(metadata: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise ModelError(f"metadata key {key!r} is not text")
        if key in RESERVED:
            raise ModelError(f"metadata key {key!r} is soma's own ({', '.join(RESERVED)})")
        try:
            out[key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        except (TypeError, ValueError) as error:
            raise ModelError(f"metadata {key!r} cannot be written as JSON: {error}") from None
    return out


def _plan(export: Export, metadata: Mapping[str, Any]) -> tensorfile.TensorPlan:
    """soma's deterministic safetensors layout, with the metadata in the header."""
    names = tensor_names(export)
    tensors = {name: export[node][key] for name, (node, key) in names.items()}
    bare = tensorfile.plan(tensors)
    header = json.loads(bytes(bare.header[8:]))
    header["__metadata__"] = {
        **_metadata_text(metadata),
        "format": FORMAT,
        "tensors": json.dumps([list(pair) for pair in names.values()]),
    }
    raw = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    raw += b" " * (-(8 + len(raw)) % 8)
    data = bare.nbytes - len(bare.header)
    return tensorfile.TensorPlan(
        struct.pack("<Q", len(raw)) + raw, bare.ordered, 8 + len(raw) + data
    )


def save_model(
    export: Export, path: str | os.PathLike[str], metadata: Mapping[str, Any] | None = None
) -> Path:
    """Write `export` as the safetensors file `path`, atomically; the path written.

    Everything is checked before a byte is written; then a temporary beside `path`, fsync,
    rename, and fsync of the folder: `path` is the old file or the whole new one, never a
    part. The folder must exist (a mistyped folder is refused, not made).
    """
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        raise ModelError(f"cannot write the model to {str(path)!r}: no folder {str(folder)!r}")
    if path.is_dir():
        raise ModelError(f"cannot write the model to {str(path)!r}: it is a folder")
    plan = _plan(export, metadata or {})
    try:
        write_atomic(path, plan.chunks())
    except OSError as error:  # a full disk, a quota: said in one line by the CLI
        raise ModelError(f"cannot write the model to {str(path)!r}: {error}") from error
    return path


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The file's `__metadata__` as written (text to text), checked to be soma's."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(os.fspath(path), framework="pt") as f:
            metadata = dict(f.metadata() or {})
    except (SafetensorError, OSError) as error:
        raise ModelError(
            f"{str(path)!r} is not a safetensors file soma can read: {error}"
        ) from None
    if metadata.get("format") != FORMAT:
        raise ModelError(
            f"{str(path)!r} is not a soma model (its metadata says format "
            f"{metadata.get('format')!r}, not {FORMAT!r})"
        )
    return metadata


def load_model(path: str | os.PathLike[str]) -> Export:
    """The export `path` holds, `{node: {key: tensor}}`, rebuilt from its exact pairs in the
    order they were written."""
    from safetensors import safe_open

    where = repr(str(path))
    metadata = read_metadata(path)
    try:
        pairs = json.loads(metadata["tensors"])
        if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)
            for p in pairs
        ):
            raise ValueError("not a list of [node, key] pairs")
    except (KeyError, ValueError) as error:
        raise ModelError(f"{where}: its metadata 'tensors' is unreadable: {error}") from None
    export: Export = {}
    with safe_open(os.fspath(path), framework="pt") as f:
        held = set(f.keys())
        for node, key in pairs:
            name = f"{node}.{key}"
            if name not in held:
                raise ModelError(f"{where}: node {node!r} key {key!r} has no tensor {name!r}")
            if key in export.get(node, {}):
                raise ModelError(f"{where}: node {node!r} key {key!r} is listed twice")
            export.setdefault(node, {})[key] = f.get_tensor(name)
            held.discard(name)
    if held:
        raise ModelError(f"{where}: tensor {sorted(held)[0]!r} is in no (node, key) pair")
    return export


# --- a run's averages, as model files ---------------------------------------------------------


def provenance(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a model file says of where it came from, from an average's record or receipt:
    the same four in both, so the workflow's model and `soma export`'s are the same bytes."""
    return {key: record[key] for key in ("run", "round", "weights", "strategy")}


def described(store: Store, record: AverageRecord, *, vouched: str | None = None) -> dict[str, Any]:
    """What a model file of `record`'s weights says of the model beyond where it came from
    (see the module): the run's task and options from the average's meeting, and, when the
    task may be made here (one of soma's own, or `vouched`: the task the caller imports
    anyway), its nodes and its `preprocessing()`. Nothing when the meeting cannot be read or
    does not hash to its key; no nodes when the task cannot be made here (logged)."""
    config = _meeting_config(store, record)
    if config is None:
        return {}
    task, options = config["task"], dict(config["options"])
    made: dict[str, Any] = {"task": task, "task_options": options}
    if isinstance(config.get("base"), str):
        made["base"] = config["base"]
    if not (task.startswith("soma.tasks.") or task == vouched):
        return made
    from soma.tasks import TaskError, importable_here, load_task

    importable_here()
    try:
        loaded = load_task(task, options)
    except TaskError as error:
        LOG.warning("the model file says nothing of task %r's nodes: %s", task, error)
        return made
    nodes = loaded.nodes(int(config.get("seed") or 0))
    made["nodes"] = json.dumps({name: repr(node) for name, node in nodes.items()})
    hook = getattr(loaded, "preprocessing", None)
    said = hook() if callable(hook) else {}
    if not isinstance(said, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in said.items()
    ):
        raise ModelError(f"task {task!r}: preprocessing() must return text to text, not {said!r}")
    made.update({f"preprocessing.{key}": value for key, value in said.items()})
    return made


def with_base(store: Store, weights: Export, about: Mapping[str, Any]) -> Export:
    """The weights with the run's frozen base beside them, when `about` (from `described`)
    names one: what a model file holds, so that the model is whole outside the store. A
    (node, key) in both is refused: the base is what is never trained."""
    digest = about.get("base")
    if not isinstance(digest, str):
        return weights
    base = store.recall_digest(digest, lazy=True)
    if not isinstance(base, Mapping):
        raise ModelError(f"the run's base {digest} in the store is not a map of nodes")
    whole: Export = {node: dict(keys) for node, keys in base.items()}
    for node, keys in weights.items():
        for key, tensor in keys.items():
            if key in whole.get(node, {}):
                raise ModelError(
                    f"node {node!r} key {key!r} is both in the run's base {digest} and trained"
                )
            whole.setdefault(node, {})[key] = tensor
    return whole


def _meeting_config(store: Store, record: AverageRecord) -> Mapping[str, Any] | None:
    """The run's config (task, options, seed) from the `about` record of `record`'s meeting,
    checked to hash to the meeting's key (which the average record names, signed where the
    run is); None when there is none or it does not match."""

    from soma.round import layout
    from soma.round.signing import SIGNED
    from soma.store.codecs import canonical_json

    if record.meeting is None:
        return None
    digest = store.resolve(layout.about(layout.meeting(record.run, record.round, record.meeting)))
    about = None if digest is None else store.recall_digest(digest)
    if not isinstance(about, Mapping):
        return None
    identity = {k: v for k, v in about.items() if k not in ("run", "round", SIGNED)}
    if hashlib.sha256(canonical_json(identity)).hexdigest() != record.meeting:
        return None
    config = identity.get("config")
    if not isinstance(config, Mapping) or not isinstance(config.get("task"), str):
        return None
    if not isinstance(config.get("options") or {}, Mapping):
        return None
    return {**config, "options": config.get("options") or {}}


def averages(store: Store, run: str) -> dict[int, dict[str, str]]:
    """Per round of `run`, every average published in it: its record's digest and the meeting
    it belongs to. Several in one round are two runs under one name, or a round rerun with
    other inputs (one meeting, two averagings). An unknown run is refused, naming the runs
    the store holds."""
    from soma.round import check_run, layout
    from soma.round.once import Place

    found: dict[int, dict[str, str]] = {}
    for r, key in check_run(store, run):
        found.setdefault(r, {})
        prefix = layout.meeting(run, r, key)
        under = layout.inputs(prefix)
        inputs = {layout.under(n, under) for n in store.bound(under)}
        named = [store.resolve(layout.average(prefix))]
        named += [
            store.resolve(Place(layout.averaging(prefix, a)).published) for a in sorted(inputs)
        ]
        for digest in named:
            if digest is not None:
                found[r][digest] = key
    return found


def choose_average(
    store: Store, run: str, round: int | None = None, average: str | None = None
) -> tuple[int, str]:
    """(round, average record digest): round `round`'s one average (None: the last round that
    has one), or the one whose digest starts with `average` (in that round, or in any).
    Several and none chosen, a round with none, a prefix that matches none or several:
    refused, listing the candidates.
    """
    found = averages(store, run)
    if round is not None and round not in found:
        raise ModelError(
            f"run {run!r} has no round {round} in the store at {store.directory} "
            f"(its rounds: {_spans(sorted(found)) or 'none'})"
        )
    done = {r: by for r, by in found.items() if by and (round is None or r == round)}
    if not done:
        what = f"round {round} of run {run!r}" if round is not None else f"run {run!r}"
        raise ModelError(f"{what} has no average yet (see soma status)")
    if average is not None:
        pool = {(r, d): key for r, by in done.items() for d, key in by.items()}
        matches = [rd for rd in pool if rd[1].startswith(average.lower())]
        if len(matches) != 1:
            where = f"round {round} of run {run!r}" if round is not None else f"run {run!r}"
            how = "no average" if not matches else f"{len(matches)} averages"
            verb = "starts" if not matches else "start"
            listed = _listing(store, run, matches or pool, pool)
            raise ModelError(f"{how} of {where} {verb} with {average!r}: {listed}")
        return matches[0]
    last = max(done)
    if len(done[last]) > 1:
        pool = {(last, d): key for d, key in done[last].items()}
        raise ModelError(
            f"round {last} of run {run!r} has {len(pool)} averages (two runs under one name, "
            f"or a rerun with other inputs); choose one with --average DIGEST (a unique prefix "
            f"will do): {_listing(store, run, pool, pool)}"
        )
    return last, next(iter(done[last]))


def _spans(rounds: list[int]) -> str:
    """0..3, 5 for [0, 1, 2, 3, 5]."""
    spans: list[list[int]] = []
    for r in rounds:
        if spans and spans[-1][1] == r - 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in spans)


def _listing(
    store: Store,
    run: str,
    listed: Iterable[tuple[int, str]],
    meeting: Mapping[tuple[int, str], str],
) -> str:
    """Each candidate average by digest, with what tells it apart: the settings its meeting
    differs in from the round's other meetings (see soma.round.labels), who came."""
    from soma.round import labels
    from soma.round.records import read_average

    apart = labels(store, run, {(r, key) for (r, _), key in meeting.items()})
    lines = []
    for r, digest in sorted(listed):
        try:
            record = read_average(store, digest)
            came = [i.get("client") for i in record.inputs]
            what = f"strategy {record.strategy}, clients {came}"
        except (SomaError, StoreError, OSError) as error:
            what = f"unreadable: {error}"
        key = meeting[(r, digest)]
        told = apart.get((r, key)) or f"meeting {key[:12]}"
        lines.append(f"{digest} (round {r}, {told}, {what})")
    return "; ".join(lines)


def export_average(
    store: Store,
    run: str,
    path: str | os.PathLike[str],
    *,
    round: int | None = None,
    average: str | None = None,
) -> dict[str, Any]:
    """Write the weights of one average of `run` (see `choose_average`) as the model file
    `path`; its provenance."""
    from soma.round.records import read_average

    r, digest = choose_average(store, run, round, average)
    record = read_average(store, digest)
    made = provenance(record.value())
    about = described(store, record)
    weights = with_base(store, store.recall_digest(record.weights, lazy=True), about)
    save_model(weights, path, {**made, **about})
    return {**made, "average": digest}


def export_receipt(
    store: str | os.PathLike[str],
    receipt: str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    vouched: str | None = None,
) -> dict[str, Any]:
    """The workflow's rule `model`: the weights an average receipt names, as the model file
    (`vouched`: the task of the job's config, see `described`)."""
    from soma.round.records import read_average
    from soma.store import Store

    with open(receipt, encoding="utf-8") as f:
        given = json.load(f)
    made = provenance(given)
    opened = Store(store)
    about: dict[str, Any] = {}
    for digest in sorted(averages(opened, given["run"]).get(given["round"], {})):
        record = read_average(opened, digest)
        if record.weights == given["weights"]:
            about = described(opened, record, vouched=vouched)
            break
    weights = with_base(opened, opened.recall_digest(given["weights"], lazy=True), about)
    save_model(weights, path, {**made, **about})
    return made


def export_best(
    store: Store,
    run: str,
    path: str | os.PathLike[str],
    metric: str,
    *,
    weights: Mapping[int, str] | None = None,
    vouched: str | None = None,
) -> dict[str, Any]:
    """Write the average of the round whose federated validation mean of `metric` is best
    (soma.run.evaluation.best_round: the clients' own held-out data, never the central test set)
    as the model file `path`; its provenance, the round among it, and the metric's mean.
    `weights` (the workflow's receipts): per round, the only weights to consider; `vouched`:
    see `described`."""
    from soma.round.records import read_average
    from soma.run.evaluation import best_round, federated_of

    chosen: dict[int, tuple[str, dict[str, Any]]] = {}
    for r, by in sorted(averages(store, run).items()):
        for digest, key in sorted(by.items()):
            record = read_average(store, digest)
            if weights is not None and weights.get(r) != record.weights:
                continue
            federated = federated_of(store, run, r, key)
            if federated is not None and federated.get("weights") == record.weights:
                chosen.setdefault(r, (digest, federated["evaluation"]))
    r, mean = best_round({r: evaluation for r, (_, evaluation) in chosen.items()}, metric)
    record = read_average(store, chosen[r][0])
    made = {**provenance(record.value()), "best": {"metric": metric, "validation": mean}}
    about = described(store, record, vouched=vouched)
    weights = with_base(store, store.recall_digest(record.weights, lazy=True), about)
    save_model(weights, path, {**made, **about})
    return {**made, "average": chosen[r][0]}
