"""One version of an asynchronous run as a model file (`soma export`): its weights as soma's
safetensors file (soma.model.save_model), with the run, the version and its record's digest
in the file's metadata. A version that does not replay from its record is refused, and so,
in a signed run, is one whose signatures (or its updates') do not hold: checked against the
roster given, else the one its signatures rebuild (soma.asynchronous.signed.reader_signing)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from soma.asynchronous.replay import replay
from soma.asynchronous.signed import reader_signing
from soma.asynchronous.versions import VersionError
from soma.model import save_model
from soma.store import Store


def export_version(
    store: Store,
    run: str,
    path: str | os.PathLike[str],
    *,
    version: int | None = None,
    roster: str | os.PathLike[str] | None = None,
    averagers: Iterable[int] | None = None,
) -> dict[str, Any]:
    """Write version `version` (None: the latest) of `run` to `path`; what was written.
    `roster`/`averagers`: the run's, the reader's own (None: rebuilt from the store)."""
    signing, _ = reader_signing(store, run, roster, averagers)
    replayed = replay(store, run, signing)
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
