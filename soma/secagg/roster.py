"""Who is in: each phase's barrier and the roster the first client through claims.

Two clients must never go on with different sets (soma.secagg.protocol, "Agreeing on who is
in"), so every phase reads its set from the roster claimed here, never from what it sees.
The keys roster's public keys are read here too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from soma.round.client import FAULT_GRACE
from soma.round.once import Backoff
from soma.round.waiting import Waiting, clients
from soma.secagg.errors import BelowThreshold, LeftOut, NotItsSecrets, SecAggError
from soma.secagg.messages import (
    anyone,
    check_present,
    check_signed,
    clients_in,
    put_signed,
    record_of,
)
from soma.secagg.session import Secrets, Session, plural
from soma.store import Store

# each phase's roster expects the one before's; the keys roster expects the members
_BEFORE = {"shares": "keys", "masked": "shares"}


def read_roster(store: Store, session: Session, phase: str, digest: str) -> dict[int, str]:
    check_signed(store, session, digest, session.name("roster", phase), None)
    record = record_of(store, digest, f"the {phase} roster of {session.what}")
    try:
        roster = {int(k): str(d) for k, d in record["present"]}
    except (KeyError, TypeError, ValueError):
        raise SecAggError(f"{session.what}: its {phase} roster is not a roster") from None
    return dict(sorted(roster.items()))


def roster_now(store: Store, session: Session, phase: str) -> dict[int, str] | None:
    """The phase's roster if it was claimed, else None."""
    digest = store.resolve(session.name("roster", phase))
    return None if digest is None else read_roster(store, session, phase, digest)


def roster_before(store: Store, session: Session, phase: str, mine: int | None) -> dict[int, str]:
    """The roster a phase needs to have been agreed already."""
    roster = roster_now(store, session, phase)
    if roster is None:
        who = "" if mine is None else f"client {mine}: "
        raise SecAggError(f"{who}{session.what} has no {phase} roster yet: a phase was skipped")
    return roster


def _expected(store: Store, session: Session, phase: str) -> list[int]:
    if phase == "keys":
        return list(session.members)
    return sorted(roster_before(store, session, _BEFORE[phase], None))


def _below(
    session: Session, phase: str, expected: list[int], here: Mapping[int, str], deadline: float
) -> BelowThreshold:
    missing = [k for k in expected if k not in here]
    have, need = len(here), session.threshold
    count = f"{have} of {len(expected)} clients"
    if phase == "keys":
        said = (
            f"{count} advertised keys, {need} needed (the threshold): {plural(missing)} never came"
        )
    elif phase == "shares":
        said = (
            f"{count} shared their secrets, {need} needed (the threshold): {plural(missing)} "
            "advertised keys and then dropped out before sharing"
        )
    else:
        said = (
            f"{count} sent a masked input, {need} needed (the threshold): {plural(missing)} "
            "dropped out after sharing"
        )
    return BelowThreshold(
        f"{session.what}: after {deadline:g}s, {said}",
        missing=missing,
        dropped=missing if phase == "masked" else [],
        have=have,
        need=need,
    )


def barrier(
    store: Store,
    session: Session,
    phase: str,
    *,
    deadline: float | None,
    backoff: Backoff,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[int, str]:
    """The barrier at the end of `phase`: wait for everyone expected, or past the deadline for
    at least the threshold; the first one through claims the roster, and all use that one."""
    digest = barrier_digest(store, session, phase, deadline=deadline, backoff=backoff, sleep=sleep)
    return read_roster(store, session, phase, digest)


def barrier_digest(
    store: Store,
    session: Session,
    phase: str,
    *,
    deadline: float | None,
    backoff: Backoff,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """`barrier`, the digest of the roster's record."""
    name = session.name("roster", phase)
    expected = _expected(store, session, phase)
    started = time.monotonic()
    delays = backoff.delays()
    noticed: dict[tuple[int, str], float] = {}  # fault notes seen, and when (FAULT_GRACE)
    vouched: dict[tuple[int, str], str | None] = {}  # what each note says, or None: nobody's
    # the notes there as this barrier began: maybe an earlier attempt's, given the grace
    before = set(clients_in(store, session.name("fault") + "/", expected).items())
    waiting = Waiting(f"{session.what}, phase {phase}")  # says whom it waits for
    while True:
        digest = store.resolve(name)
        if digest is not None:
            return digest
        here = clients_in(store, session.name(phase) + "/", expected)
        out = set(clients_in(store, session.name("withdrawn") + "/", expected)) - set(here)
        awaited = set(expected) - set(here) - out
        standing = _stop_on_fault(store, session, awaited, noticed, vouched, before)
        past = deadline is not None and time.monotonic() - started > deadline
        accounted = len(here) + len(out) == len(expected)  # nobody else is coming
        if accounted and len(here) < session.threshold:
            raise _below(session, phase, expected, here, time.monotonic() - started)
        if past and standing:  # never unmasked around a client whose store failed: its note
            sleep(next(delays))  # stops this barrier once it has stood the grace
            continue
        if accounted or (past and len(here) >= session.threshold):
            check_present(store, session, phase, here, out)
            record = {
                "phase": phase,
                "expected": expected,
                "present": [[k, d] for k, d in sorted(here.items())],
            }
            store.claim(name, put_signed(store, session, record, name, anyone(session)))
            continue  # whichever roster won the claim is everybody's
        if past:
            assert deadline is not None
            raise _below(session, phase, expected, here, deadline)
        awaited = [k for k in expected if k not in here and k not in out]
        waiting.tick(clients, awaited)
        sleep(next(delays))


class PeerStoreFault(SecAggError):
    """A peer's part failed on the store's fault (its note says so): the sum is not unmasked
    around a broken store, so every waiting client stops, naming it."""


def note_fault(store: Store, session: Session, mine: int, why: str) -> None:
    """Client `mine` failed on the store's fault (soma.run.step): say so beside the
    withdrawals, so that the barriers stop at once instead of going on without it at their
    deadline. Bound, not claimed: a later attempt's fault replaces an earlier one's."""
    name = session.name("fault", mine)
    store.bind(name, put_signed(store, session, {"client": mine, "fault": str(why)}, name, mine))


def _stop_on_fault(
    store: Store,
    session: Session,
    awaited: set[int],
    noticed: dict[tuple[int, str], float],
    vouched: dict[tuple[int, str], str | None],
    before: set[tuple[int, str]],
) -> list[int]:
    """PeerStoreFault for the first awaited client whose fault note is signed by it (a note
    nobody can vouch for stops nothing, `vouched` remembers) and was written while this
    barrier waited, or, one there `before` it began (an earlier attempt's, which a rerun of
    the client replaces), has stood for FAULT_GRACE seconds since this barrier `noticed` it;
    else the clients whose notes stand without stopping it yet, which it must wait for (as
    soma.round.client.Faults does for a plain round)."""
    now, standing = time.monotonic(), []
    for k, digest in sorted(clients_in(store, session.name("fault") + "/", awaited).items()):
        if (k, digest) not in vouched:
            try:
                check_signed(store, session, digest, session.name("fault", k), k)
                said = record_of(store, digest, f"client {k}'s fault note")["fault"]
                vouched[k, digest] = str(said)
            except Exception:  # forged or unreadable: nobody's word
                vouched[k, digest] = None
        why = vouched[k, digest]
        if why is None:
            continue
        since = noticed.setdefault((k, digest), now)
        if (k, digest) in before and now - since < FAULT_GRACE:
            standing.append(k)
            continue
        raise PeerStoreFault(
            f"{session.what} stops: the store failed client {k}'s part ({why}); the sum is not "
            "unmasked around a broken store: once the store works, run again"
        )
    return standing


def must_be_in(roster: Mapping[int, str], secrets: Secrets, phase: str) -> None:
    if secrets.mine not in roster:
        raise LeftOut(
            f"{secrets.session.what}: client {secrets.mine} came after the {phase} roster was "
            f"agreed without it ({plural(sorted(roster))}); the sum goes on without its export",
            secrets.mine,
            phase,
        )


def public_keys(store: Store, session: Session, roster: Mapping[int, str]) -> dict[int, dict]:
    """Every advertised client's public keys, by the digests the keys roster names."""
    keys: dict[int, dict] = {}
    for k, digest in roster.items():
        check_signed(store, session, digest, session.name("keys", k), k)
        record = record_of(store, digest, f"client {k}'s keys")
        try:
            c, s = bytes.fromhex(record["c"]), bytes.fromhex(record["s"])
            commitment = str(record["b_commitment"])
        except (KeyError, TypeError, ValueError):
            raise SecAggError(f"{session.what}: client {k}'s keys are not keys") from None
        if record.get("client") != k or len(c) != 32 or len(s) != 32:
            raise SecAggError(f"{session.what}: the keys roster's record for client {k} is not its")
        keys[k] = {"c": c, "s": s, "b_commitment": commitment}
    return keys


def keys_of(store: Store, secrets: Secrets) -> dict[int, dict]:
    """The public keys of the keys roster, read once per client (the roster never changes)."""
    if secrets._keys is None:
        session = secrets.session
        roster = roster_before(store, session, "keys", secrets.mine)
        secrets._keys = public_keys(store, session, roster)
    return secrets._keys


def check_own(store: Store, secrets: Secrets) -> None:
    """Refuse secrets that are not the ones client `secrets.mine` published the public half of
    for this session (its two public keys and its self-mask commitment, the signed record at
    `<session>/keys/<client>`), before any of it is used: secrets read back from a folder
    somebody swapped (another client's, another session's, made up) would otherwise mask with
    keys nobody else holds, or share and reveal what they should not."""
    session, mine = secrets.session, secrets.mine
    name = session.name("keys", mine)
    digest = store.resolve(name)
    if digest is None:
        raise NotItsSecrets(
            f"{session.what}: client {mine} published no keys there ({name!r}), so the secrets "
            "it was given are not its own for this session: refused before use"
        )
    check_signed(store, session, digest, name, mine)
    published = record_of(store, digest, f"client {mine}'s keys")
    ours = secrets.public()
    differ = [k for k in ("c", "s", "b_commitment") if published.get(k) != ours[k]]
    if differ or published.get("client") != mine:
        raise NotItsSecrets(
            f"{session.what}: client {mine}'s secrets are not those whose public half it "
            f"published ({name!r}: {', '.join(differ or ['client'])} differ); its secrets "
            "file was replaced or is another's: refused before use"
        )
