"""A holder's lease (soma.round.lease.Lease) and a waiter's clock on it (Watch), in one
process: a bucket's names played by tests/memory_bucket.py's backend in memory, the waiter's
monotonic clock by a number the test moves.
Only a lease a roster member signed, and further on than the last one seen, restarts the
clock: whoever can write the bucket but holds no roster key cannot keep a dead holder from
being taken over by writing its lease again and again, neither with leases it forged nor with
the holder's own old ones bound again. (tests/round/test_lease_s3.py: the same with a killed
averaging process on the real S3 server.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from memory_bucket import MemoryBucket  # noqa: E402

from soma.round import lease  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.round.signing import Signing, make_keys  # noqa: E402
from soma.store.backend import BackendStore  # noqa: E402

PLACE = "r/round/0/inputs/x"
SECONDS = 1.0  # the holder's lease
STEP = 0.25  # how often the forger writes, and the waiter looks (exact in binary)


class Clock:
    """The waiter's monotonic clock: what `now` says, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def signing_in(folder: Path, clients: list[int]) -> Signing:
    return Signing.of({k: make_keys(folder, k)[1] for k in clients}, str(folder / "{client}.key"))


@pytest.fixture
def setting(tmp_path: Path) -> tuple[BackendStore, Signing, Signing, str]:
    """A store, the run's roster (clients 0, 1), a key off it, and a dead holder's claim
    signed by a roster member (what the waiter judges)."""
    store = BackendStore(MemoryBucket())
    signing, off = signing_in(tmp_path / "roster", [0, 1]), signing_in(tmp_path / "off", [9])
    holder = lease.put_holder(store, signing, PLACE, {"pid": 1, "host": "elsewhere"})
    return store, signing, off, holder


def signed_lease(store: BackendStore, signing: Signing, renewals: int, by: int = 0) -> str:
    terms = lease.Terms("h", 0, renewals, SECONDS).value()
    return signatures.put(store, signing, terms, name=lease.layout.lease(PLACE), by=by)


def gone_at(watch: lease.Watch, clock: Clock, holder: str, writes: Iterator[None]) -> float:
    """When the waiter first takes the holder for gone, one look after each of `writes`
    (a step of the clock apart); 0 if it never does."""
    for _ in writes:
        clock.now += STEP
        if watch.gone(PLACE, lease.layout.claimed(PLACE), holder):
            return clock.now
    return 0.0


def test_leases_nobody_on_the_roster_signed_give_a_dead_holder_three_leases_not_forever(
    setting,
) -> None:
    """A dead holder's lease overwritten every step, by turns unsigned and signed off the
    roster, each saying it lasts forever and is renewed more than any: the waiter's clock
    runs on from the holder's last genuine lease, three leases long (its renewals may have
    been overwritten unread), never restarted by what it does not believe."""
    store, signing, off, holder = setting
    store.bind(lease.layout.lease(PLACE), signed_lease(store, signing, 0))
    clock = Clock()
    watch = lease.Watch(store, signing, SECONDS, clock=clock)
    assert not watch.gone(PLACE, lease.layout.claimed(PLACE), holder)

    def forging() -> Iterator[None]:
        for n in range(40):
            terms = lease.Terms("x", 0, 10**6 + n, 1e9).value()
            name = lease.layout.lease(PLACE)
            if n % 2:
                digest = signatures.put(store, off, terms, name=name, by=9)
            else:
                digest = store.put_value(terms)
            store.bind(name, digest)
            yield

    taken = gone_at(watch, clock, holder, forging())
    assert taken, "a dead holder was never taken over while its lease was forged"
    assert taken == lease.LEASES_WHEN_OVERWRITTEN * SECONDS + STEP, taken


def test_a_dead_holders_own_old_leases_bound_again_are_no_renewal(setting) -> None:
    """The holder renewed twice and died; its genuine signed leases from before are bound
    again, by turns, every step: they are believed, but none is further on than the last
    the waiter saw, so its clock runs out one lease after that one."""
    store, signing, _, holder = setting
    clock = Clock()
    watch = lease.Watch(store, signing, SECONDS, clock=clock)
    old = [signed_lease(store, signing, renewals) for renewals in range(3)]
    for digest in old:  # the holder's renewals, seen as they came
        store.bind(lease.layout.lease(PLACE), digest)
        assert not watch.gone(PLACE, lease.layout.claimed(PLACE), holder)
        clock.now += STEP
    died = clock.now - STEP

    def binding_again() -> Iterator[None]:
        for n in range(40):
            store.bind(lease.layout.lease(PLACE), old[n % 2])
            yield

    taken = gone_at(watch, clock, holder, binding_again())
    assert taken, "a dead holder was never taken over while its old leases were bound again"
    assert taken == died + SECONDS + STEP, (taken, died)


# --- the holder's side: a lease renewed, published, or lost to a successor ------------------


@pytest.fixture
def held(setting) -> tuple[BackendStore, Signing, Signing, lease.Lease]:
    """The lease of generation 1 acquired by a roster member, lasting an hour: its daemon never
    renews it during a test, which renews it by hand."""
    store, signing, off, _ = setting
    holding = lease.acquire(store, signing, PLACE, "h", 1, 3600.0)
    assert isinstance(holding, lease.Lease)
    yield store, signing, off, holding
    holding.stop()


def test_a_holder_whose_lease_a_successor_took_neither_renews_it_nor_publishes(held) -> None:
    """A holder that stalled past its lease (a stopped process, a slow disk) finds a successor
    of the next generation holding it: its renewal is refused and so is its publish, so it
    cannot take the lease back and publish over the successor's average."""
    store, signing, _, holding = held
    successor = lease.acquire(store, signing, PLACE, "s", 2, 3600.0)
    assert isinstance(successor, lease.Lease)
    try:
        assert not holding.renew(), "a late holder renewed a lease its successor holds"
        assert not holding.finish("d" * 64), "a late holder published over its successor"
        found = lease.read(store, signing, PLACE)
        assert found is not None and found[1] is not None
        assert (found[1].holder, found[1].published) == ("s", None)
    finally:
        successor.stop()


def test_a_lease_overwritten_by_nobody_on_the_roster_is_swapped_back_and_kept(held) -> None:
    """Whoever can write the bucket but holds no roster key overwrites the holder's lease,
    unsigned or signed off the roster: that is no successor, so the holder swaps its lease
    back over it and keeps renewing and publishing."""
    store, signing, off, holding = held
    name = lease.layout.lease(PLACE)
    forged = lease.Terms("x", 7, 10**6, 1e9).value()
    for digest in (store.put_value(forged), signatures.put(store, off, forged, name=name, by=9)):
        store.bind(name, digest)
        assert holding.renew(), "a forged lease took the lease from a live holder"
    store.bind(name, store.put_value(forged))
    assert holding.finish("d" * 64), "a forged lease kept a live holder from publishing"
    found = lease.read(store, signing, PLACE)
    assert found is not None and found[1] is not None and found[1].published == "d" * 64
