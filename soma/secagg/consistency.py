"""The consistency check (Bonawitz et al.'s malicious-server variant), with a roster: before
revealing, each client signs the survivors it saw and refuses when the signed sets differ.

Called by `phases.reveal` as `consistency.consistent(...)` (looked up at call time, so that
tests/round/mutants_sign.py can break it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from soma.round.once import POLL, Backoff
from soma.round.waiting import Waiting, clients
from soma.secagg.errors import BelowThreshold, SecAggError
from soma.secagg.messages import check_signed, clients_in, record_of, write_signed
from soma.secagg.roster import barrier_digest, must_be_in, read_roster
from soma.secagg.session import Secrets, Session, plural
from soma.store import Store


class SplitRoster(SecAggError):
    """Two clients of a secure sum were shown different survivors (masked rosters): revealing
    could hand out both halves of one client's mask. Names the client whose signed set differs."""


def confirm(
    store: Store,
    session: Session,
    secrets: Secrets,
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
) -> str:
    """Client `secrets.mine` signs the survivors it saw (the masked roster, by digest), under
    `confirmed/<k>`, before anything is revealed; the roster's digest. A process hosting
    several clients confirms for all of them before any reveals (see `consistent`)."""
    masked = barrier_digest(store, session, "masked", deadline=deadline, backoff=backoff)
    contributors = read_roster(store, session, "masked", masked)
    must_be_in(contributors, secrets, "masked")
    mine = secrets.mine
    record = {"client": mine, "masked": masked, "survivors": sorted(contributors)}
    write_signed(store, session, "confirmed", mine, record, f"client {mine}'s survivors")
    return masked


def consistent(
    store: Store,
    session: Session,
    mine: int,
    masked: str,
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
    sleep: Callable[[float], None] = time.sleep,
) -> list[int]:
    """Wait until at least the threshold of the survivors signed the very survivors client
    `mine` saw (`masked`, the roster's digest); any that signed others is refused by name
    (SplitRoster), before anything is revealed. The clients that confirmed."""
    contributors = read_roster(store, session, "masked", masked)
    started, delays = time.monotonic(), backoff.delays()
    waiting = Waiting(f"{session.what}, client {mine}'s survivors confirmed")
    while True:
        here = clients_in(store, session.name("confirmed") + "/", contributors)
        for k, digest in here.items():
            check_signed(store, session, digest, session.name("confirmed", k), k)
            said = record_of(store, digest, f"client {k}'s survivors")
            if said.get("client") != k or said.get("masked") != masked:
                raise SplitRoster(
                    f"{session.what}: client {k} signed other survivors "
                    f"({said.get('survivors')!r}, roster {str(said.get('masked'))[:12]}) than "
                    f"client {mine} saw ({sorted(contributors)}, roster {masked[:12]}): the "
                    "store showed them different rosters; nothing is revealed"
                )
        if len(here) >= min(session.threshold, len(contributors)):
            return sorted(here)
        if deadline is not None and time.monotonic() - started > deadline:
            never = [k for k in contributors if k not in here]
            raise BelowThreshold(
                f"{session.what}: after {deadline:g}s, {len(here)} of the {len(contributors)} "
                f"survivors signed what they saw, {session.threshold} needed (the threshold): "
                f"{plural(never)} never did; nothing is revealed",
                missing=never,
                dropped=[],
                have=len(here),
                need=session.threshold,
            )
        awaited = [k for k in contributors if k not in here]
        waiting.tick(clients, awaited)
        sleep(next(delays))
