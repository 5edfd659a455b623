"""Leases: who holds a claim where nobody can prove a holder dead (a bucket shared by sites).

On a folder a holder is taken over only once its pid or its Slurm job proves it gone
(soma.round.holders); from another site neither can be asked. On a store with
compare-and-swap (`swap`: soma.store.backend) a claim comes with a lease at `p/lease`, a
record {holder, generation, renewals, seconds, published} that its holder renews by
compare-and-swap every `seconds / 3` while it computes:

- expiry trusts no clock across sites: a waiter takes the holder for gone once it has seen
  the SAME lease (the same holder at the same tag) unrenewed for more than `seconds` on its
  own monotonic clock; then it claims takeover generation g+1 (create-if-absent: one taker)
  and swaps the lease to itself, never over a later generation's;
- the publish is conditional: the holder's last step swaps its own lease to "published
  <digest>", and only then claims `p/published`; a holder whose lease was swapped away
  (it stalled past its lease) finds that swap refused and publishes nothing, and whoever
  finds a lease in the published state completes the publish of its digest;
- with a roster (soma.round.signing) holder and lease records are signed by a roster member,
  for the name they are kept under, and a waiter believes only those. A lease that is not
  (unsigned, signed by a key off the roster, or for another name) is ignored: the last
  lease it believed, and its clock, stand. That clock restarts only on a believed lease
  further on (a later generation, or more renewals: an old signed lease bound again is no
  renewal) or a believed claim it had not seen, and once it has read a lease it does not
  believe since then it waits three leases instead of one; with no lease ever believed, a believed
  claim is judged by the waiter's own lease seconds from when it first saw it, and a claim
  that is not believed either holds nothing (taken over at once). A holder whose swap is
  refused reads the lease again and swaps over it unless a later generation's believed
  lease is there, and renews four times as often while its lease is being overwritten.
  Whoever can write the store but holds no roster key cannot keep a live holder from
  publishing (only stop the run, as by deleting), and cannot take its work away unless it
  overwrites the lease so fast that a waiter reads none of the holder's renewals for a whole
  lease: then the work is computed twice and still published once.

A holder alive but unable to renew for longer than its lease (partitioned, stopped) is taken
over: the work may then be computed twice, and is published once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soma.errors import SomaError
from soma.round import layout
from soma.round import signing as signatures
from soma.store import Store
from soma.store.errors import StoreError

LOG = logging.getLogger("soma.round.lease")


# How often a holder swaps again over a lease somebody else overwrote before it gives up
# this renewal (the next one tries again).
SWAP_TRIES = 20

# How many times per lease a holder renews: normally, and while somebody that does not hold
# it overwrites its lease (so that waiters, who read one slot, still see it renewed).
RENEWALS_PER_LEASE = 3
RENEWALS_PER_LEASE_CONTESTED = 12

# How many leases a waiter gives a holder once it has read, since it last saw the holder
# renew, a lease nobody on the roster signed: overwrites can hide a live holder's renewals
# from a waiter that reads the one slot between them.
LEASES_WHEN_OVERWRITTEN = 3


class LeaseContested(SomaError):
    """A holder's lease is overwritten, again and again, by somebody that does not hold it."""


def leased(store: Store) -> bool:
    """Whether claims on `store` come with leases: it has compare-and-swap."""
    return callable(getattr(store, "swap", None))


@dataclass(frozen=True)
class Terms:
    """A lease record: whose, of which takeover generation, renewed how often, how long it
    lasts, and what its holder published (None while it computes)."""

    holder: str
    generation: int
    renewals: int
    seconds: float
    published: str | None = None

    def value(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "generation": self.generation,
            "renewals": self.renewals,
            "seconds": self.seconds,
            "published": self.published,
        }


def signer(signing: signatures.Signing | None) -> int | None:
    """Who signs holder and lease records: a roster member whose key this process holds."""
    return None if signing is None else signing.any_member()


def holder_name(place: str) -> str:
    """What a holder record is signed for: the place whose work it holds (claimed or
    taken over there, the same record)."""
    return place


def put_holder(store: Store, signing: signatures.Signing | None, place: str, me: dict) -> str:
    """This process's holder record for `place`, signed with a roster; its digest."""
    return signatures.put(store, signing, me, name=holder_name(place), by=signer(signing))


def believed(
    store: Store, signing: signatures.Signing | None, digest: str, *, name: str, what: str
) -> bool:
    """Whether the record `digest` kept at `name` is signed by a roster member (always, with
    no roster); a record that is not is logged and counts for nothing."""
    try:
        signatures.check(store, signing, digest, name=name, writer=None, what=what)
    except (SomaError, StoreError) as error:
        LOG.warning("%s: counted as no holder", error)
        return False
    return True


def _terms(store: Store, digest: str) -> Terms | None:
    try:
        value = store.recall_digest(digest)
        return Terms(
            str(value["holder"]),
            int(value["generation"]),
            int(value["renewals"]),
            float(value["seconds"]),
            value.get("published"),
        )
    except (SomaError, StoreError, KeyError, TypeError, ValueError):
        return None


def read(
    store: Store, signing: signatures.Signing | None, place: str
) -> tuple[str, Terms | None] | None:
    """The place's lease: its tag and its terms (None when unsigned, forged or unreadable:
    no holder's), or None when there is none."""
    found = store.resolve_tagged(layout.lease(place))
    if found is None:
        return None
    digest, tag = found
    if not believed(store, signing, digest, name=layout.lease(place), what=f"lease of {place}"):
        return tag, None
    terms = _terms(store, digest)
    if terms is None:
        LOG.warning("lease of %s (record %s) is not a lease: counted as no holder", place, digest)
    return tag, terms


class Lease:
    """A lease this process holds on the work at a place, renewed by a daemon thread."""

    def __init__(
        self,
        store: Store,
        signing: signatures.Signing | None,
        place: str,
        terms: Terms,
        tag: str,
    ) -> None:
        self.store, self.signing, self.place = store, signing, place
        self.terms, self.tag = terms, tag
        self.lost = threading.Event()  # somebody swapped it away: a successor holds it
        self.contested = False  # the last renewal found the lease overwritten by no successor
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renewing, daemon=True, name="soma-lease")
        self._thread.start()

    def _swap(self, terms: Terms) -> str | None:
        """Swap the lease to `terms` if it is still ours; the new tag, or None (lost).

        A swap refused because somebody else wrote the lease is tried again over what is
        there, unless that is a successor's: a believed lease of a later generation. What
        nobody on the roster signed, or a believed lease of this generation or an earlier one
        (an old record bound again), is no successor's, and must not get this holder judged
        gone or keep it from publishing."""
        name = layout.lease(self.place)
        digest = signatures.put(self.store, self.signing, terms.value(), name=name,
                                by=signer(self.signing))  # fmt: skip
        tag = self.tag
        for tries in range(SWAP_TRIES):
            new = self.store.swap(name, tag, digest)
            if new is not None:
                self.contested = tries > 0
                return new
            found = read(self.store, self.signing, self.place)
            if found is None:  # deleted: create it again
                tag = None
                continue
            tag, theirs = found
            if theirs is not None and theirs.generation > terms.generation:
                return None
            LOG.warning(
                "lease of %s was overwritten by no successor (%s): swapped over",
                self.place,
                "not signed by the roster" if theirs is None else f"generation {theirs.generation}",
            )
        raise LeaseContested(
            f"lease of {self.place}: overwritten {SWAP_TRIES} times in a row as its holder "
            f"{self.terms.holder[:12]} swapped it, by nobody that holds it"
        )

    def renew(self) -> bool:
        """One renewal (compare-and-swap from the tag last written); False once lost."""
        return self._become(lambda terms: {"renewals": terms.renewals + 1})

    def _become(self, change: Callable[[Terms], dict[str, Any]]) -> bool:
        """Swap the lease to its terms with `change(terms)` applied, if it is still ours;
        False (and lost from then on) when a successor swapped it first."""
        with self._lock:
            if self.lost.is_set():
                return False
            changed = Terms(**{**self.terms.value(), **change(self.terms)})
            tag = self._swap(changed)
            if tag is None:
                self.lost.set()
                return False
            self.terms, self.tag = changed, tag
            return True

    def _renewing(self) -> None:
        while not self._stop.wait(self.terms.seconds / self._renewals_per_lease()):
            try:
                if not self.renew():
                    LOG.warning("lease of %s was taken over: a successor holds it", self.place)
                    return
            except (SomaError, StoreError, OSError) as error:  # the next renewal may get through
                LOG.warning("lease of %s not renewed: %s", self.place, error)

    def _renewals_per_lease(self) -> int:
        return RENEWALS_PER_LEASE_CONTESTED if self.contested else RENEWALS_PER_LEASE

    def stop(self) -> None:
        """Renew no more (the lease then runs out unless it is finished)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def finish(self, digest: str) -> bool:
        """Swap the lease to "published `digest`": the condition of publishing it. False
        when a successor took the lease first (publish nothing then)."""
        self.stop()
        return self._become(lambda terms: {"published": digest})


def acquire(
    store: Store,
    signing: signatures.Signing | None,
    place: str,
    holder: str,
    generation: int,
    seconds: float,
) -> Lease | str | None:
    """The lease for the claim of `generation` this process just won: a Lease it now holds
    (renewing); a digest when the lease says that was published already (complete that
    publish); None when a later generation holds it (a successor: this claim is late)."""
    mine = Terms(holder, generation, 0, float(seconds))
    name = layout.lease(place)
    digest = signatures.put(store, signing, mine.value(), name=name, by=signer(signing))
    while True:
        found = read(store, signing, place)
        if found is not None:
            tag, terms = found
            if terms is not None and terms.published is not None:
                return terms.published
            if terms is not None and terms.generation >= generation:
                return None
        new = store.swap(name, None if found is None else found[0], digest)
        if new is not None:
            return Lease(store, signing, place, mine, new)


class Watch:
    """A waiter's view of the holder at a place: gone once the holder's believed lease has
    been seen no further on for longer than it lasts, by this process's own monotonic clock.

    What it believes (with a roster: records signed by a roster member) is all that moves
    its clock: a forged lease neither restarts nor shortens it, and a forged claim does not
    restart it. A forged lease read since the holder last renewed gives the holder
    LEASES_WHEN_OVERWRITTEN leases instead of one: its renewals may have been overwritten
    before this waiter read them."""

    def __init__(
        self,
        store: Store,
        signing: signatures.Signing | None,
        seconds: float,
        clock: Any = time.monotonic,
    ) -> None:
        self.store, self.signing, self.seconds, self.clock = store, signing, seconds, clock
        self.seen: tuple[str, ...] | None = None  # the believed claim the clock runs for
        self.lease: Terms | None = None  # the believed lease furthest on, at that place
        self.place: str | None = None
        self.since = 0.0
        self.published: str | None = None  # a lease found in the published state
        self.overwritten = False  # a lease not believed read since the clock last restarted
        self._believed: dict[tuple[str, str], bool] = {}

    def gone(self, place: str, name: str, digest: str) -> bool:
        """Whether the holder `digest` of the claim `name` at `place` is gone."""
        key = (place, digest)
        if key not in self._believed:
            what = f"holder of {name}"
            ok = believed(self.store, self.signing, digest, name=holder_name(place), what=what)
            self._believed[key] = ok
        now = self.clock()
        if place != self.place:  # other inputs: nothing seen there yet
            self.place, self.seen, self.lease, self.since = place, None, None, now
            self.overwritten = False
        found = read(self.store, self.signing, place)
        terms = None if found is None else found[1]
        if terms is not None and terms.published is not None:
            self.published = terms.published
            return False
        if terms is not None and (self.lease is None or _further(terms, self.lease)):
            self.lease, self.since, self.overwritten = terms, now, False  # renewed, or later
        if self._believed[key] and (place, name, digest) != self.seen:
            self.seen, self.since = (place, name, digest), now  # a claim not seen before
        if self.lease is None and self.seen is None:
            return True  # a claim nobody on the roster signed, and no lease: it holds nothing
        self.overwritten |= found is not None and terms is None
        lasts = self.lease.seconds if self.lease is not None else self.seconds
        return now - self.since > lasts * (LEASES_WHEN_OVERWRITTEN if self.overwritten else 1)


def _further(terms: Terms, than: Terms) -> bool:
    """Whether lease `terms` is further on than `than`: of a later generation, or renewed
    more. A lease bound again with an old record is not."""
    return (terms.generation, terms.renewals) > (than.generation, than.renewals)
