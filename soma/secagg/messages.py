"""A session's messages in the store: written once, read back by digest, and (when the run
has a roster) signed by their client and checked before use (soma.round.signing).

Every phase, roster and the unmasking write and read through here, so that a name is never
written twice and an unsigned message is never taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from soma.round import once
from soma.round import signing as signatures
from soma.round.once import read_record
from soma.secagg.errors import SecAggError
from soma.secagg.session import Session
from soma.store import Store, codecs
from soma.store.errors import StoreError

# --- the store: written once, read by digest ------------------------------------------------


def write_once(store: Store, name: str, value: object, what: str) -> str:
    digest = store.put_value(value)
    if store.claim(name, digest) or store.resolve(name) == digest:
        return digest
    raise SecAggError(
        f"{what}: {name!r} is already written, with something else (a second process as the "
        "same client, or the session run again: a session's prefix is used once)"
    )


def record_of(store: Store, digest: str, what: str) -> dict[str, Any]:
    try:
        return read_record(store, digest)
    except (StoreError, once.RoundError) as error:
        raise SecAggError(f"cannot read {what}: {error}") from None


def tree_of(store: Store, digest: str, what: str) -> dict[str, Any]:
    """A record's JSON alone, its tensors left unread (what a check needs of a masked input)."""
    try:
        tree, _ = codecs.parse_record(store.get_record(digest), digest)
    except StoreError as error:
        raise SecAggError(f"cannot read {what}: {error}") from None
    if not isinstance(tree, dict):
        raise SecAggError(f"{what} is not a record")
    return tree


def clients_in(store: Store, folder: str, expected: Iterable[int]) -> dict[int, str]:
    """{client: digest} of the expected clients with a name under `folder`."""
    wanted = set(expected)
    found: dict[int, str] = {}
    for name in store.bound(folder):
        tail = name[len(folder) :]
        if tail.isdigit() and int(tail) in wanted:
            digest = store.resolve(name)
            if digest is not None:
                found[int(tail)] = digest
    return found


# --- signed messages (soma.round.signing), when the run has a roster ------------------------


def check_signed(
    store: Store, session: Session, digest: str, name: str, writer: int | None
) -> None:
    """Refuse the message `digest` at `name` unless client `writer` (None: anyone on the
    roster) signed it; nothing to check without a roster."""
    what = f"{session.what}: " + ("a message" if writer is None else f"client {writer}'s message")
    signatures.check(store, session.signing, digest, name=name, writer=writer, what=what)


def check_present(
    store: Store, session: Session, phase: str, here: Mapping[int, str], out: Iterable[int]
) -> None:
    """Before a roster is claimed: every record it takes, and every withdrawal it goes on
    without, signed by its client."""
    if session.signing is None:
        return
    for k, digest in here.items():
        check_signed(store, session, digest, session.name(phase, k), k)
    for k, digest in clients_in(store, session.name("withdrawn") + "/", out).items():
        check_signed(store, session, digest, session.name("withdrawn", k), k)


def anyone(session: Session) -> int | None:
    """Who signs what any member may write (a roster, the sum): a roster member whose key
    this process holds (refused when none); None without a roster."""
    return None if session.signing is None else session.signing.any_member(session.members)


def put_signed(store: Store, session: Session, value: dict, name: str, by: int | None) -> str:
    return signatures.put(store, session.signing, value, name=name, by=by)


def write_signed(
    store: Store, session: Session, phase: str, mine: int, value: dict, what: str
) -> str:
    """Client `mine`'s message of `phase`, signed by it, written once."""
    name = session.name(phase, mine)
    return write_once(
        store, name, signatures.signed(store, session.signing, value, name=name, by=mine), what
    )
