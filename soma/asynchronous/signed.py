"""An asynchronous run's records signed with the run's roster (soma.round.signing), as a
round's are: each update by its client, each version by one of the roster's averagers (any
member where the run declared none), every signature bound to the name the record is kept
under and to the run's charter. Without a roster nothing is signed or checked.

A client checks a version before it trains from it (`check_version`): its record signed by
an averager, and every update it consumed the record its client signed under its name, with
the weights and size the version took. So a version forged by whoever can write the store (a
non-member's key, a member outside the averagers, no signature at all), or one made of a
forged update, is refused by name before anything is trained from it. Whoever makes a
version refuses a pending update whose signature does not hold (`forged`): it is named in
the version's `refused`, never consumed, and the audit checks that it was indeed forged.

`soma audit` and `soma export` read the roster given (`--roster`), or rebuild it from the
keys the run's updates were signed with, kept only when it hashes to the digest the run's
version 0 and charter name (`reader_signing`), as a synchronous run's audit does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from soma.errors import SomaError
from soma.round import layout
from soma.round import signing as signatures
from soma.round.once import read_record
from soma.store import Store
from soma.store.errors import StoreUnavailable

FORGED = "forged"  # a refused entry's key: refused because its signature does not hold
FROM_STORE = "roster read from the store, not anchored"
UNSIGNED = "no roster: the run is unsigned (whoever could write the store could write any record)"


def version_name(run: str, v: int) -> str:
    """The name version v's record is published, and signed, under."""
    return layout.published(layout.version(run, v))


def version_what(run: str, v: int) -> str:
    return f"version {v} of asynchronous run {run!r}"


def version_signer(signing: signatures.Signing | None, among: Iterable[int] | None) -> int | None:
    """Whose key signs the versions this process makes (an averager whose key it holds, its
    own clients `among` first); None without a roster. Refused (SigningError) when none."""
    return None if signing is None else signing.any_member(among)


def may_make(signing: signatures.Signing | None, among: Iterable[int] | None) -> bool:
    """Whether this process can sign a version (without a roster, anyone can make one): a
    process holding no averager's key leaves the versions to those that do."""
    try:
        version_signer(signing, among)
    except signatures.SigningError:
        return False
    return True


def put_update(
    store: Store, signing: signatures.Signing | None, value: Mapping[str, Any], *, name: str
) -> str:
    """Client `value["client"]`'s update record kept, signed by it for `name`; its digest."""
    return signatures.put(store, signing, value, name=name, by=int(value["client"]))


def put_version(
    store: Store,
    signing: signatures.Signing | None,
    value: Mapping[str, Any],
    *,
    name: str,
    by: int | None,
) -> str:
    """A version's record kept, signed by the averager `by` for `name`; its digest."""
    return signatures.put(store, signing, value, name=name, by=by)


def check_update(
    store: Store,
    signing: signatures.Signing | None,
    digest: str,
    *,
    name: str,
    client: int,
    where: str = "",
) -> None:
    """Refuse update record `digest` at `name` unless client `client` signed it there;
    `where` (the version that took it) begins the refusal."""
    what = f"{where}client {client}'s update"
    signatures.check(store, signing, digest, name=name, writer=client, what=what)


def check_signer(
    store: Store, signing: signatures.Signing | None, run: str, v: int, digest: str
) -> int | None:
    """Who signed version v's record `digest`: an averager of the roster (refused otherwise,
    naming the version and the signer); None without a roster."""
    return signatures.check_average(
        store, signing, digest, name=version_name(run, v), what=version_what(run, v)
    )


def check_consumed(
    store: Store, signing: signatures.Signing | None, run: str, v: int, entry: Mapping[str, Any]
) -> None:
    """Refuse a consumed entry of version v unless the update it names is the record its
    client signed under that name, with the weights and size the version took."""
    if signing is None:
        return
    name, client, record = entry.get("update"), entry.get("client"), entry.get("record")
    where = f"{version_what(run, v)}: client {client}'s update {name!r}"
    parsed = layout.update_of(str(name), run)
    if parsed is None or parsed[1] != client or not isinstance(record, str):
        raise signatures.SigningError(f"{where} is not an update of client {client} of the run")
    taken = f"{version_what(run, v)}: "
    check_update(store, signing, record, name=str(name), client=parsed[1], where=taken)
    update = read_record(store, record)
    said = (entry.get("weights"), entry.get("size"), entry.get("from"))
    if said != (update.get("weights"), update.get("size"), update.get("from")):
        raise signatures.SigningError(
            f"{where}: the version took weights {str(said[0])[:12]} from {said[2]}, and its "
            f"signed record {record[:12]} says {str(update.get('weights'))[:12]} from "
            f"{update.get('from')}"
        )


def check_version(
    store: Store, signing: signatures.Signing | None, run: str, v: int, digest: str
) -> None:
    """What a client checks before it trains from version v (see the module): refused
    (SigningError) naming the version and the client."""
    if signing is None:
        return
    check_signer(store, signing, run, v, digest)
    value = read_record(store, digest)
    for entry in value.get("consumed") or []:
        check_consumed(store, signing, run, v, entry if isinstance(entry, Mapping) else {})


def forged(
    store: Store, signing: signatures.Signing | None, digest: str, *, name: str, client: int
) -> str | None:
    """Why the pending update `digest` at `name` cannot be client `client`'s (its signature
    does not hold, or its record cannot be read as signed); None when it can (or no roster)."""
    if signing is None:
        return None
    try:
        check_update(store, signing, digest, name=name, client=client)
    except SomaError as error:
        return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return None


# --- the roster a reader checks against ------------------------------------------------------


def said_roster(store: Store, run: str) -> str | None:
    """The roster digest the run says it is signed under: its version 0's record's, else its
    charter's (so that a version 0 rewritten unsigned does not make the run unsigned)."""
    digest = store.resolve(version_name(run, 0))
    first = read_record(store, digest) if digest is not None else {}
    said = first.get("roster")
    return said if isinstance(said, str) else signatures.charter_roster(store, run)


def reader_signing(
    store: Store,
    run: str,
    roster: str | os.PathLike[str] | None = None,
    averagers: Iterable[int] | None = None,
) -> tuple[signatures.Signing | None, str]:
    """The roster an asynchronous run is checked against, and how it was found: the roster
    file given (the reader's own), else rebuilt from the keys the run's updates were signed
    with, each under its client's name, kept when it hashes to the digest the run says
    (`said_roster`); None for an unsigned run. Refused (NoRoster) naming what is missing."""
    if roster is not None:
        return signatures.for_reader(store, run, roster, averagers), f"given: {roster}"
    said = said_roster(store, run)
    if said is None:
        return None, UNSIGNED
    keys: dict[int, set[str]] = {}
    for name in store.bound(layout.updates(run)):
        parsed, digest = layout.update_of(name, run), store.resolve(name)
        try:
            value = read_record(store, digest) if parsed is not None and digest else {}
        except StoreUnavailable:
            raise
        except SomaError:  # a record that cannot be read names no key: its replay says why
            continue
        signed = value.get(signatures.SIGNED)
        if parsed is not None and isinstance(signed, dict) and isinstance(signed.get("key"), str):
            keys.setdefault(parsed[1], set()).add(signed["key"])
    found = {k: next(iter(ks)) for k, ks in keys.items() if len(ks) == 1}
    if found and len(found) == len(keys):
        signing = signatures.Signing.of(found, None, averagers)
        if signing.digest == said:
            return signing, FROM_STORE
    chosen = "" if averagers is None else f" with averagers {sorted(set(averagers))}"
    raise signatures.NoRoster(
        f"asynchronous run {run!r} is signed (roster {said[:12]}) and the keys its updates "
        f"were signed with (clients {sorted(keys)}){chosen} are not that roster: give it "
        "(--roster FILE; --averagers, those the run declared)"
    )
