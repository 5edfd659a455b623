"""Tasks: what a federated run trains, named by import path so that users can bring their own.

A task is a module with `make(**options) -> Task`; the workflow's `task:` (and the command
line's `--task`) is its import path, e.g. `soma.tasks.digits` or `mypkg.mytask`, and
`task_options:` are handed to `make`. A Task answers four questions:

- `nodes(seed)`: the model's named nodes, fresh from a seed (every client starts from the
  same weights because the run's start is kept in the store and loaded).
- `shard(client, clients)`: client `client`'s training data, deterministic, of a size
  `size(data)` (the weight its export carries in the average).
- `train(nodes, data, *, seed, objective=None)`: local training of the nodes on the data
  (the task builds its own optimizer, which is never exported); returns metrics (JSON
  numbers). `objective` is the strategy's client side (FedProx's proximal term, SCAFFOLD's
  control variates; see soma.strategies): pass it on to `TrainingRun(objective=...)`, or,
  in a loop of your own, call `soma.training.adjust_on_cpu(objective, parameters, lr)`
  after each backward, `parameters` being `soma.training.keyed_parameters(nodes)` (see
  examples/myloop.py). A task whose
  train() takes no `objective` still works with every strategy that has no client side
  (FedAvg, FedAdam, the robust ones); one that does is refused before any round starts.
- `evaluate(nodes)`: metrics on a central held-out test set, e.g. `{"accuracy": 0.93,
  "loss": 0.21}`; optional for a task that has `evaluate_local`.
- `evaluate_local(nodes, client, clients)`, optional: federated evaluation, the metrics of the
  given weights on client `client`'s own held-out split (never its training data), and how
  many examples they are of: `({"accuracy": 0.9}, 84)`. Each round, the clients that
  evaluate (the round's sample, or `evaluate_participation`) answer it for the round's
  average; the round's metrics are the mean weighted by those sizes, with the spread over
  clients beside it (soma.run.evaluation). A task needs `evaluate` or `evaluate_local`, or both.

A task's train() that takes a `context` keyword is also told where it stands, a `Context`:
the round (from 0), the run's number of rounds, the client and the run's client count, the
same in every mode; e.g. a learning rate decayed across rounds,
`lr = self.lr * 0.5 ** (context.round / context.rounds)`. A train() without it is called
as before.

Optionally `everything()` (`everything(clients)`: told the run's client count): all the
training data as one shard, for the centralized baseline (by default the union of all shards
is not assumed to be expressible, and the baseline is skipped); and `check(clients)`:
refuse, as a TaskError, a client count the task's options cannot serve (the digits task:
too few clients to hold every digit), so that the workflow's `start` job says so before any
client trains.

Optionally `preprocessing()`: what the model's inputs must be made of, as text to text
(the digits task: the pixels' scale and the training split's per-pixel mean and std, as
JSON), written into every model file of the run as `preprocessing.<key>` (soma.model), so
that the model is used outside soma on inputs prepared as in training (examples/use_model.py).

Optionally `base(seed)`: the weights the nodes of `seed` sit on and never train (an export,
`{node: {key: tensor}}`, or None), such as the pretrained model under LoRA adapters
(soma.tasks.adapters, whose `nodes(seed)` are the adapters alone). The nodes are what is
exported and averaged each round; the base is put in the store once (a second put of the
same bytes writes nothing), its digest joins the run's identity (a client whose base differs
meets apart: refused naming both digests) and its records, and every model file of the run
holds it beside the trained nodes (soma.run.base, soma.model). The workflow's start job keeps
it and names it in its receipt and `run.json`; each train job checks its own base against it.

A task module may declare its option names as a module-level literal, `OPTIONS = ("epochs",
"lr", ...)`: `declared_options` reads it from the module's source without running the module
(so without importing torch), and the Snakefile refuses an unknown option at parse time. The
type of each, where `make()` is annotated to return a class whose field of that name is
annotated `int`, `float`, `str` or `bool` (or one of them `| None`), is read the same way
(`declared_option_types`), and a value of another type is refused at parse time too
(soma.config.task_options).
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from soma.errors import TaskError

if TYPE_CHECKING:  # torch only for the annotations: the Snakefile imports this at parse time
    from torch import nn

    from soma.tasks.protocol import Objective


class TaskNotFound(TaskError):
    """The import path names no task: nothing importable there, no make(), or not a Task.

    Its own class so that the workflow can tell the user which config key to change
    (`task`, not `task_options`)."""


class OptionsRefused(TaskError):
    """The task's make() refused its options with a TypeError (an unknown name) or a
    ValueError, or an option the task does not declare (see `check_option_names`)."""


@dataclass(frozen=True)
class Context:
    """Where a client's training stands, for a task's train() that takes `context=`: the
    round (0-based) of `rounds`, and client `client` of `clients`."""

    round: int
    rounds: int
    client: int
    clients: int


@runtime_checkable
class Task(Protocol):
    """What a task answers (see the module's docstring, and examples/ for tasks to copy)."""

    def nodes(self, seed: int) -> dict[str, nn.Module]: ...

    def shard(self, client: int, clients: int) -> Any: ...

    def size(self, data: Any) -> int: ...

    def train(
        self,
        nodes: Mapping[str, nn.Module],
        data: Any,
        *,
        seed: int,
        objective: Objective | None = None,
        context: Context | None = None,  # optional: a train() without it is called without
    ) -> dict[str, float]: ...

    def evaluate(self, nodes: Mapping[str, nn.Module]) -> dict[str, float]: ...


# `evaluate` is optional for a task that has `evaluate_local` (checked by RunSpec.checked).
REQUIRED = ("nodes", "shard", "size", "train")


def importable_here() -> None:
    """A task module in the working directory is importable too, whichever way soma was
    started: the workflow's jobs, and `soma client` (whose script's sys.path lacks it)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _import_refusal(path: str, error: ImportError) -> str:
    """Why task `path` cannot be imported: not found (where to put it), or found, and its own
    import failed (what it imports is missing: the task's to fix, not PYTHONPATH)."""
    missing = getattr(error, "name", None)
    if missing is not None and (path == missing or path.startswith(f"{missing}.")):
        return (
            f"task {path!r} cannot be imported: {error} (a module in the working folder is "
            "found; one elsewhere needs its folder on PYTHONPATH)"
        )
    return (
        f"task {path!r} was found, and its own import failed: {error} (install what it "
        "imports, or fix the import in the task's module)"
    )


def load_task(path: str, options: Mapping[str, Any] | None = None) -> Task:
    """The task at import path `path`, made with `options`; refused clearly when it is not one.

    TaskNotFound when the path names no task; the task's own TaskError when make() refuses
    an option by name (passed on as it is: a subclass, such as a device's refusal, stays
    what it is); OptionsRefused when make() raises a TypeError (an unknown name) or another
    ValueError. Any TaskError but TaskNotFound is about the options.
    """
    try:
        module = importlib.import_module(path)
    except ImportError as error:
        raise TaskNotFound(_import_refusal(path, error)) from error
    make = getattr(module, "make", None)
    if not callable(make):
        raise TaskNotFound(f"task module {path!r} has no make(**options) function")
    given = dict(options or {})
    try:
        task = make(**given)
    except TaskError:
        raise
    except (TypeError, ValueError) as error:
        raise OptionsRefused(f"task {path!r} refused its options {given}: {error}") from error
    missing = [name for name in REQUIRED if not callable(getattr(task, name, None))]
    if missing:
        raise TaskNotFound(f"task {path!r} lacks {', '.join(missing)} (see soma.tasks)")
    return task


def source_of(path: str, where: list[str] | None = None) -> str | None:
    """The file of module `path`, found without running it or any package above it.

    importlib.util.find_spec("a.b") would import package `a`, which may import torch or
    anything else; this finds the top-level name as an import would (the working directory
    first, as `soma.workflow.task_of` puts it on sys.path; then every finder, an editable
    install's included) and walks the packages' folders from there. `where`: search only
    these folders. None when it is not found that way (a namespace package, a zip, an
    extension module): whoever needs the module then imports it and says what is wrong.
    """
    top, *parts = path.split(".")
    if where is not None:
        spec = importlib.machinery.PathFinder.find_spec(top, list(where))
    else:
        spec = importlib.machinery.PathFinder.find_spec(top, [os.getcwd()]) or _top_level(top)
    for part in parts:
        search = list(getattr(spec, "submodule_search_locations", None) or [])
        spec = importlib.machinery.PathFinder.find_spec(part, search) if search else None
    origin = getattr(spec, "origin", None)
    return origin if origin and origin.endswith(".py") else None


def _top_level(name: str) -> importlib.machinery.ModuleSpec | None:
    """A top-level module's spec from every finder; finding a top-level name runs nothing."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _parsed_source(path: str, where: list[str] | None) -> ast.Module | None:
    """Task module `path`'s source as a syntax tree, read without running it; None when it
    cannot be found or read so."""
    source = source_of(path, where)
    if source is None:
        return None
    try:
        with open(source, encoding="utf-8") as file:
            return ast.parse(file.read(), filename=source)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def declared_options(path: str, where: list[str] | None = None) -> tuple[str, ...] | None:
    """The option names task module `path` declares as `OPTIONS = (...)`, read from its
    source without running it; None when it declares none (or cannot be read so)."""
    tree = _parsed_source(path, where)
    if tree is None:
        return None
    for node in tree.body:
        value = _assigned(node, "OPTIONS")
        if value is not None:
            try:
                names = ast.literal_eval(value)
            except ValueError:
                return None
            if isinstance(names, (tuple, list, set, frozenset)) and all(
                isinstance(n, str) for n in names
            ):
                return tuple(names)
            return None
    return None


def defines(path: str, name: str, where: list[str] | None = None) -> bool:
    """Whether task module `path`'s source defines a function or method `name` (read, not
    run): how the Snakefile knows, without torch, that a task answers `evaluate_local` and so
    that the run has a best round to export. False when its source cannot be read so."""
    tree = _parsed_source(path, where)
    if tree is None:
        return False
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
        for node in ast.walk(tree)
    )


def _assigned(node: ast.stmt, name: str) -> ast.expr | None:
    """The value of a module-level `name = ...` (or `name: T = ...`), else None."""
    if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in node.targets
    ):
        return node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.value if node.target.id == name else None
    return None


def check_option_names(
    path: str, options: Mapping[str, Any], where: list[str] | None = None
) -> None:
    """Refuse an option the task does not declare, naming the config key, before any job.

    What the Snakefile checks at parse time: only names, and only for a task that declares
    them (`OPTIONS`); values, and tasks that declare nothing, are the `start` job's to check.
    """
    declared = declared_options(path, where)
    unknown = sorted(set(options) - set(declared)) if declared is not None else []
    if unknown:
        raise OptionsRefused(
            f"config key `task_options` (under {path!r}): {', '.join(map(repr, unknown))} "
            f"{'is not an option' if len(unknown) == 1 else 'are not options'} of the task; "
            f"it takes {', '.join(declared)}"
        )


# The annotations `declared_option_types` reads (soma.config.task_options checks values).
OPTION_TYPES = ("int", "float", "str", "bool")


def declared_option_types(
    path: str, where: list[str] | None = None
) -> dict[str, tuple[str, bool]] | None:
    """Each declared option's type, as (`int`, `float`, `str` or `bool`, whether null is
    allowed), read from task module `path`'s source without running it: the annotation of the
    field of that name in the class `make()` is annotated to return. An option whose field is
    not there, or is annotated otherwise, is left out; None when the module declares none."""
    declared = declared_options(path, where)
    tree = _parsed_source(path, where) if declared is not None else None
    if tree is None:
        return None
    made = next(
        (
            node.returns.id
            for node in tree.body
            if isinstance(node, ast.FunctionDef)
            and node.name == "make"
            and isinstance(node.returns, ast.Name)
        ),
        None,
    )
    fields = {
        item.target.id: item.annotation
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == made
        for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    }
    found = {}
    for name in declared:
        if name in fields:
            kinds = [k.strip() for k in ast.unparse(fields[name]).split("|")]
            nullable = "None" in kinds
            kinds = [k for k in kinds if k != "None"]
            if len(kinds) == 1 and kinds[0] in OPTION_TYPES:
                found[name] = (kinds[0], nullable)
    return found
