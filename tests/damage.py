"""What the reliability tests share (tests/run/test_reliability.py and
test_reliability_records.py): the exports of a run made to be damaged, and the rerun that
`soma verify`'s advice asks for, done as the seeded rerun would do it."""

from __future__ import annotations

from pathlib import Path

import torch

from soma import health
from soma.store import Store


def client_export(r: int, k: int) -> dict:
    """Client k's export of round r (r = -1: the starting weights), from a seed of its own."""
    g = torch.Generator().manual_seed(100 * r + k)
    return {"fc": {"w": torch.randn(64, 32, generator=g), "b": torch.randn(64, generator=g)}}


def named(problem: health.Problem, store: Store) -> str | None:
    """The client name a problem is about, when it is a client's record or its name file."""
    if problem.kind == "bad-name":
        return str(Path(problem.path).relative_to(store.directory / "names"))
    for via in problem.via:
        if via.startswith("name '") and "/client/" in via:
            return via[len("name '") : -1]
    return None


def rerun(store: Store, pristine: Store, problem: health.Problem) -> bool:
    """Do what the advice says, as the seeded rerun would: a client's round again binds its
    name to a new record (it says who and when) and puts the same export bytes again; the
    starting weights are put again from the seed. False when the advice is no rerun."""
    if "export of round" not in problem.fix and "starting weights" not in problem.fix:
        return False
    name = named(problem, store)
    if name is not None:
        store.keep(name, {**pristine.recall(name), "by": {"rerun": True}})
    else:
        store.put(pristine.get(problem.digest))
    return True
