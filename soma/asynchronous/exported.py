"""One version of an asynchronous run as a model file (`soma export`): its weights as soma's
safetensors file (soma.model.save_model), with the run, the version and its record's digest
in the file's metadata. A version that does not replay from its record is refused."""

from __future__ import annotations

import os
from typing import Any

from soma.asynchronous.replay import replay
from soma.asynchronous.versions import VersionError
from soma.model import save_model
from soma.store import Store


def export_version(
    store: Store, run: str, path: str | os.PathLike[str], *, version: int | None = None
) -> dict[str, Any]:
    """Write version `version` (None: the latest) of `run` to `path`; what was written."""
    replayed = replay(store, run)
    v = len(replayed) - 1 if version is None else version
    if not 0 <= v < len(replayed):
        raise VersionError(
            f"asynchronous run {run!r} has versions 0..{len(replayed) - 1}, not version {v}"
        )
    broken = next((r for r in replayed[: v + 1] if r.problems), None)
    if broken is not None:
        raise VersionError(
            f"version {v} of run {run!r} is not exported: version {broken.version} does not "
            f"replay from its record ({broken.problems[0]}); see `soma audit`"
        )
    chosen = replayed[v]
    made = {"run": run, "version": v, "weights": chosen.value["weights"], "record": chosen.record}
    save_model(store.recall_digest(made["weights"], lazy=True), path, made)
    return made
