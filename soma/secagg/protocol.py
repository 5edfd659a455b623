"""Secure aggregation on a shared folder, with nobody in charge: every phase a barrier in the store.

The protocol, what is public and what is not, and the threat model are
docs/explanation/secure-aggregation.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from soma.nodes import Export
from soma.round.once import POLL, Backoff
from soma.secagg.phases import advertise, masked_input, reveal, share
from soma.secagg.quantize import DEFAULT_PRECISION_BITS, DEFAULT_RING_BITS
from soma.secagg.ring import check_input
from soma.secagg.session import Session
from soma.secagg.unmask import sum_of, unmask
from soma.store import Store

__all__ = ["secure_sum"]


def secure_sum(
    store: Store,
    prefix: str,
    export: Export,
    size: float | None,
    *,
    mine: int,
    members: Iterable[int],
    threshold: int,
    deadline: float | None,
    lease: float,
    precision_bits: int = DEFAULT_PRECISION_BITS,
    ring_bits: int = DEFAULT_RING_BITS,
    backoff: Backoff = POLL,
) -> tuple[Export, float]:
    """All the phases for one client: (sum of size * export over the contributors, their total
    size). Every member calls it, with the same prefix, members, threshold and fixed point.

    Blocks at each barrier (`deadline` seconds each); one of the clients unmasks and publishes
    (on a bucket its claim leased for `lease` seconds), everyone leaves with the same answer.
    A client arriving after the sum was published gets it at once. The export is refused
    (`BadInput`) before anything is written. A client left out of a phase gets `LeftOut`
    (`result` then waits for the others' sum); too few clients to go on, `BelowThreshold`.
    """
    session = Session(prefix, tuple(members), threshold, precision_bits, ring_bits)
    digest = store.resolve(session.name("sum"))
    if digest is not None:
        return sum_of(store, digest, session.what)
    check_input(session, mine, export, size)
    secrets = advertise(store, session, mine)
    share(store, session, secrets, deadline=deadline, backoff=backoff)
    masked_input(store, session, secrets, export, size, deadline=deadline, backoff=backoff)
    reveal(store, session, secrets, deadline=deadline, backoff=backoff)
    return unmask(store, session, deadline=deadline, backoff=backoff, lease=lease)
