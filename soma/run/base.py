"""A task's frozen base: kept once in the store, named by digest in the run's identity.

A task may answer `base(seed)` (soma.tasks): the weights its nodes sit on and never train,
such as the pretrained model under LoRA adapters (soma.tasks.adapters). They are never
exported, so they never cross the store with a round; instead they are put in the store
once (content-addressed: a second put of the same bytes writes nothing) and claimed as what
the run starts from (`<run>/starts/<digest>`: reachable, so `soma gc` keeps it), and their
digest joins the run's identity (RunSpec.base, soma.config.identity): every meeting, and so
every round's `about` record, names it, a client whose base differs meets apart (the waiting
client is told, naming both digests: soma.round.conflicts), and a model file of the run holds
the base beside the trained nodes (soma.model).

The digest is of the base as a value (soma.store.values.value_digest), not of the file it
was read from: the same weights written by two tools are one base.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from soma.errors import TaskError

if TYPE_CHECKING:
    from soma.config.spec import RunSpec
    from soma.nodes import Export
    from soma.store import Store


class BaseDiffers(TaskError):
    """This process's base is not the run's: it would train other weights under its name."""


def base_of(task: Any, seed: int) -> Export | None:
    """The task's `base(seed)`, or None when it has none (or says None), checked to be an
    export `{node: {key: tensor}}`."""
    import torch

    hook = getattr(task, "base", None)
    if not callable(hook):
        return None
    base = hook(seed)
    if base is None:
        return None
    if not isinstance(base, Mapping) or not all(
        isinstance(node, str)
        and isinstance(keys, Mapping)
        and all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in keys.items())
        for node, keys in base.items()
    ):
        raise TaskError(f"the task's base({seed}) is not {{node: {{key: tensor}}}}: {type(base)}")
    return {node: dict(keys) for node, keys in base.items()}


def digest_of(task: Any, seed: int) -> str | None:
    """The digest the task's base has (or would have) in a store; None: no base."""
    from soma.store.values import value_digest

    base = base_of(task, seed)
    return None if base is None else value_digest(base)


def keep(spec: RunSpec, store: Store, task: Any) -> RunSpec:
    """The task's base put in `store` (nothing written when it is there already) and claimed
    under the run's name for what it starts from (`<run>/starts/<digest>`, as its start
    weights: reachable, so `soma gc` keeps it while the run is kept), and `spec` with its
    digest (RunSpec.base); `spec` itself for a task without one."""
    from soma.round import layout

    base = base_of(task, spec.seed)
    if base is None:
        return spec
    digest = store.put_value(base)
    store.claim(layout.starting(spec.run, digest), digest)
    return dataclasses.replace(spec, base=digest)


def named(spec: RunSpec, digest: str | None) -> RunSpec:
    """`spec` with the base `digest` a receipt names (the workflow's: the start job kept it)."""
    return spec if digest is None else dataclasses.replace(spec, base=digest)


def check(task: Any, seed: int, run: str, recorded: str | None) -> None:
    """Refuse, naming both digests, a task whose base is not the one the run was started
    with (`recorded`: the start receipt's): a base file changed or replaced since."""
    mine = digest_of(task, seed)
    if mine != recorded:
        raise BaseDiffers(
            f"run {run!r} was started on base {recorded or 'none'}, and this process's task "
            f"has base {mine or 'none'}: the base file changed since the start (put the "
            "start's base back, or name a new run)"
        )
