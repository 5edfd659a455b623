"""What a reader of the store takes as a run's (`soma status`, `soma export`, the workflow's
model and best jobs): the records whose signatures hold against the roster the reader was
given, and whether the store says the run has a roster at all.

Kept apart from the writers' checks (soma.round.signed, which take a Meeting made from the
local config): a reader has no meeting of its own, only the names it finds in the store and
the roster it was handed, so that a record a store writer without a key forged (a round of
their own, an evaluation) is never shown or exported as the run's.
"""

from __future__ import annotations

from collections.abc import Iterable

from soma.errors import SomaError
from soma.round import layout
from soma.round import signing as signatures
from soma.round.once import read_record
from soma.store import Store
from soma.store.errors import StoreError


class UncheckedRun(signatures.SigningError):
    """A run whose meetings say it has a roster, read by a reader that was given none."""


def refusal(
    store: Store,
    signing: signatures.Signing | None,
    digest: str,
    *,
    name: str,
    writer: int | None,
    what: str,
) -> str | None:
    """Why the record `digest` at `name` is not to be taken (unsigned, signed by a key off the
    roster or by another client's, changed or moved): the refusal's words; None when its
    `writer` (None: anyone on the roster) signed it, or when the reader has no roster."""
    try:
        signatures.check(store, signing, digest, name=name, writer=writer, what=what)
    except signatures.SigningError as error:
        return str(error)
    return None


def average_refusal(
    store: Store, signing: signatures.Signing | None, run: str, round: int, key: str, digest: str
) -> str | None:
    """Why round `round`'s average record `digest` of meeting `key` is not the run's (see
    `refusal`): a roster member allowed to average signs it, for its meeting's `average`
    name."""
    name = layout.average(layout.meeting(run, round, key))
    what = f"round {round} of run {run!r}: the average record"
    try:
        signatures.check_average(store, signing, digest, name=name, what=what)
    except signatures.SigningError as error:
        return str(error)
    return None


def says_roster(store: Store, run: str, found: Iterable[tuple[int, str]]) -> bool:
    """Whether any of the run's meetings `found` ((round, key) pairs) says the run has a
    roster: its `about` (the identity whose digest is the meeting's key) names one, or its
    average record is signed. What tells a reader given no roster that it should have one."""
    for r, key in found:
        prefix = layout.meeting(run, r, key)
        for name in (layout.about(prefix), layout.average(prefix)):
            try:
                digest = store.resolve(name)
                record = read_record(store, digest) if digest else {}
            except (SomaError, StoreError, OSError):
                continue  # unreadable: a reader says so where it reads it
            if record.get("roster") or record.get(signatures.SIGNED):
                return True
    return False


def unchecked(run: str) -> str:
    """What a reader without a roster says of a run that has one."""
    return (
        f"run {run!r} has a roster (its meetings say so) and no roster was given: its "
        "signatures are not checked (pass --roster FILE)"
    )
