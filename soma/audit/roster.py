"""Which roster an audit checks signatures against, and how far that roster is to be trusted.

Given (`--roster FILE`), it is the auditor's own: the signatures prove who wrote what, as far
as the auditor trusts that file. Not given, it is read from the store: the public keys the
run's records were signed with, kept only when they hash to the roster digest every meeting's
identity names (so it is the run's roster, not a guess). That roster is only as good as the
store: whoever could write the store could have made a run of their own keys from the start,
so it is labelled "read from the store, not anchored". A run whose meetings name no roster
is unsigned, and said so.
"""

from __future__ import annotations

from collections.abc import Iterable

from soma.round import layout
from soma.round import signing as signatures
from soma.round.once import read_record
from soma.store import Store

GIVEN = "given"
FROM_STORE = "roster read from the store, not anchored"
UNSIGNED = "no roster: the run is unsigned (whoever could write the store could write any record)"


def roster_digests(store: Store, run: str, found: Iterable[tuple[int, str]]) -> set[str]:
    """The roster digests the run's meetings' identities (`about`) name."""
    said = set()
    for r, key in found:
        digest = store.resolve(layout.about(layout.meeting(run, r, key)))
        about = read_record(store, digest) if digest else None
        if isinstance(about, dict) and isinstance(about.get("roster"), str):
            said.add(about["roster"])
    return said


def from_store(
    store: Store,
    run: str,
    found: list[tuple[int, str]],
    digests: set[str],
    averagers: Iterable[int] | None = None,
) -> signatures.Signing:
    """The roster whose digest the meetings name, rebuilt from the keys the run's client
    records were signed with (each client's own: a record at client k's name), with the
    averagers the run declared (`averagers`, which that digest covers; None: none). Refused
    naming what is missing when the keys found do not hash to that digest (a client that
    never signed a record, or two keys for one client)."""
    keys: dict[int, set[str]] = {}
    for r, key in found:
        prefix = layout.meeting(run, r, key)
        for name in store.bound(layout.clients(prefix)):
            k = layout.client_of(name[len(prefix) + 1 :])
            digest = store.resolve(name)
            value = read_record(store, digest) if k is not None and digest else None
            said = value.get(signatures.SIGNED) if isinstance(value, dict) else None
            if isinstance(said, dict) and isinstance(said.get("key"), str):
                keys.setdefault(k, set()).add(said["key"])
    where = f"run {run!r}"
    doubled = sorted(k for k, found_keys in keys.items() if len(found_keys) > 1)
    if doubled:
        raise signatures.NoRoster(
            f"{where}: clients {doubled} signed with more than one key in the store; give the "
            "run's roster (--roster FILE)"
        )
    roster = {k: next(iter(found_keys)) for k, found_keys in keys.items()}
    if roster and len(digests) == 1:
        signing = signatures.Signing.of(roster, None, averagers)
        if signing.digest in digests:
            return signing
    named = ", ".join(sorted(d[:12] for d in digests))
    chosen = "" if averagers is None else f" with averagers {sorted(set(averagers))}"
    raise signatures.NoRoster(
        f"{where} is signed (its meetings name roster {named}) "
        f"and the keys its records were signed with (clients {sorted(roster)}){chosen} are "
        "not that roster: give it (--roster FILE; --averagers, those the run declared)"
    )
