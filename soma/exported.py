"""Which of a run's averages a reader may write out as the model (`soma export`, its `--best`,
the workflow's `model` and `best` jobs): with a roster, only one whose average record, and
for `--best` whose federated evaluation record, a roster member signed.

Kept apart from soma.model, which writes whatever average it is handed: here is the one
place that decides what is handed to it, so that a round a store writer without a key added
(an all-zero model, a fake best round) is refused, naming the round and why, before any file
is written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from soma.model import (
    ModelError,
    averages,
    described,
    export_average,
    export_best,
    provenance,
    save_model,
)
from soma.round import layout, readers
from soma.round.signing import Signing
from soma.store import Store


class ForgedRound(ModelError):
    """The round a reader asked for has no average a roster member signed: refused, naming the
    round and why; nothing is written."""


def reader_signing(
    store: Store,
    run: str,
    roster: str | os.PathLike[str] | None,
    *,
    unchecked: bool = False,
    averagers: Iterable[int] | None = None,
) -> Signing | None:
    """The roster a reader checks `run`'s records against (the file `roster`, with the
    `averagers` the run declared: signing.for_reader); None when none was given and the
    run's meetings say it has none. A run that has one, read without it, is refused
    (UncheckedRun) unless `unchecked` says to take its records unchecked."""
    from soma.round import check_run
    from soma.round.signing import for_reader

    if roster is not None:
        return for_reader(store, run, roster, averagers)
    if not unchecked and readers.says_roster(store, run, check_run(store, run)):
        raise readers.UncheckedRun(
            readers.unchecked(run) + "; or --unchecked to export it without checking"
        )
    return None


def _sorted_out(
    store: Store, run: str, signing: Signing
) -> tuple[dict[int, dict[str, str]], dict[int, dict[str, str]]]:
    """Per round, the averages whose signatures hold ({digest: meeting key}) and those whose
    do not ({digest: why})."""
    held: dict[int, dict[str, str]] = {}
    forged: dict[int, dict[str, str]] = {}
    for r, by in averages(store, run).items():
        for digest, key in by.items():
            why = readers.average_refusal(store, signing, run, r, key, digest)
            if why is None:
                held.setdefault(r, {})[digest] = key
            else:
                forged.setdefault(r, {})[digest] = why
    return held, forged


def _refused(r: int, forged: Mapping[str, str], held: Mapping[int, Any]) -> ForgedRound:
    why = "; ".join(forged.values())
    signed = [x for x in held if x < r]
    hint = f" (round {max(signed)} is the last before it that is signed: --round)" if signed else ""
    return ForgedRound(f"not exported: {why}{hint}")


def export_checked(
    store: Store,
    run: str,
    path: str | os.PathLike[str],
    *,
    signing: Signing | None,
    round: int | None = None,
    average: str | None = None,
) -> dict[str, Any]:
    """soma.model.export_average, with a roster only of a signed average: the last round (or
    `round`) is refused, naming it and why, when none of its averages is signed; an average
    chosen by digest prefix (`average`) is refused when its own signature does not hold."""
    if signing is None:
        return export_average(store, run, path, round=round, average=average)
    held, forged = _sorted_out(store, run, signing)
    if average is not None:
        bad = {
            (r, d): why
            for r, by in forged.items()
            for d, why in by.items()
            if d.startswith(average.lower()) and round in (None, r)
        }
        good = [d for r, by in held.items() for d in by if d.startswith(average.lower())]
        if bad and not good:
            why = bad[min(bad)]
            raise ForgedRound(f"average {average} is not exported: {why}")
    else:
        r = round if round is not None else max([*held, *forged], default=None)
        if r is not None and r in forged and r not in held:
            raise _refused(r, forged[r], held)
        if r is not None and len(held.get(r, {})) == 1:
            average = next(iter(held[r]))  # the signed one, whatever else the round holds
    return export_average(store, run, path, round=round, average=average)


def export_best_checked(
    store: Store,
    run: str,
    path: str | os.PathLike[str],
    metric: str,
    *,
    signing: Signing | None,
    weights: Mapping[int, str] | None = None,
    vouched: str | None = None,
) -> dict[str, Any]:
    """soma.model.export_best, with a roster among the signed averages whose federated
    evaluation record a roster member signed only; `ignored` lists every record left out for
    its signature, with why (empty without a roster). `vouched`: see soma.model.described."""
    from soma.round.records import read_average
    from soma.run.evaluation import best_round

    if signing is None:
        made = export_best(store, run, path, metric, weights=weights, vouched=vouched)
        return {**made, "ignored": []}
    held, forged = _sorted_out(store, run, signing)
    ignored = [why for by in forged.values() for why in by.values()]
    chosen: dict[int, tuple[str, dict[str, Any]]] = {}
    for r, by in sorted(held.items()):
        for digest, key in sorted(by.items()):
            record = read_average(store, digest)
            if weights is not None and weights.get(r) != record.weights:
                continue
            name = layout.federated(layout.meeting(run, r, key))
            found = store.resolve(name)
            if found is None:
                continue
            what = f"round {r} of run {run!r}: the federated evaluation record"
            why = readers.refusal(store, signing, found, name=name, writer=None, what=what)
            if why is not None:
                ignored.append(why)
                continue
            federated = store.recall_digest(found)
            if federated.get("weights") == record.weights:
                chosen.setdefault(r, (digest, federated["evaluation"]))
    r, mean = best_round({r: evaluation for r, (_, evaluation) in chosen.items()}, metric)
    record = read_average(store, chosen[r][0])
    made = {**provenance(record.value()), "best": {"metric": metric, "validation": mean}}
    about = described(store, record, vouched=vouched)
    save_model(store.recall_digest(record.weights, lazy=True), path, {**made, **about})
    return {**made, "average": chosen[r][0], "ignored": ignored}


def signed_weights(
    store: Store, signing: Signing | None, run: str, round: int, weights: str
) -> str:
    """The digest of round `round`'s average record that a roster member signed and that names
    `weights` (the workflow's `model` job: the weights its average receipt names); refused,
    naming the round and why, when there is none. Nothing to check without a roster."""
    from soma.round.records import read_average

    if signing is None:
        return weights
    held, forged = _sorted_out(store, run, signing)
    for digest in held.get(round, {}):
        if read_average(store, digest).weights == weights:
            return digest
    why = "; ".join(forged.get(round, {}).values()) or "no signed average record names them"
    raise ForgedRound(f"round {round} of run {run!r}: weights {weights} are not exported: {why}")
