"""Exactly once on a shared folder, with nobody in charge: check, claim, compute, publish.

Many processes may find the same work ready (a round's averaging); exactly one does it. A
place `p` in the store holds, for one piece of work:

    p/claimed           who is doing it (claimed, so exactly one)
    p/takeover/<g>      who took it over from a holder proven gone (claimed too)
    p/computed/<who>    one entry per computation actually run: the store's own count
    p/published         what it produced (claimed as well: published once, never rebound)
    p/lease             on a store with compare-and-swap only: the holder's lease

Everything that can be refused is refused before the claim, by every process that finds the
work ready (`check`): a refusal after the claim would leave the work claimed by somebody
alive who gave up, and everyone else would be told it "died holding it", blaming the wrong
cause. This module knows nothing of torch or of averaging: it is handed `ready()` (the
inputs once they are all there, else None), `check(inputs)` and `compute(inputs, me)`.

A holder is proven gone on a folder by its pid or its Slurm job (soma.round.holders). On a
store with compare-and-swap (a bucket shared across sites, where neither can be asked) a
claim comes with a lease instead, renewed while its holder computes and the condition of its
publish (soma.round.lease); with a roster, holder and lease records there are signed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from soma.errors import SomaError
from soma.round import holders, layout
from soma.round import lease as leases
from soma.round.signing import Signing
from soma.round.waiting import Waiting, clients
from soma.slurm.time_limit import held_reason, raised_at_time_limit
from soma.store import Store
from soma.timing import Backoff

T = TypeVar("T")


class RoundError(SomaError, ValueError):
    """A round cannot go on as asked."""


class RoundIncomplete(RoundError, TimeoutError):
    """Somebody is missing: clients that never came."""

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


class AveragerDied(RoundError, TimeoutError):
    """Nobody is missing, yet nothing published: whoever claimed the work died holding it."""

    def __init__(self, message: str, holder: dict[str, Any]) -> None:
        super().__init__(message)
        self.holder = holder


POLL = Backoff()  # the default


@dataclass(frozen=True)
class Place:
    """Where one piece of work happens: its claim, takeovers, audit and published result."""

    prefix: str

    @property
    def claimed(self) -> str:
        return layout.claimed(self.prefix)

    @property
    def takeovers(self) -> str:
        return layout.takeovers(self.prefix)

    @property
    def computed(self) -> str:
        return layout.computed(self.prefix)

    def takeover(self, generation: object) -> str:
        return layout.takeover(self.prefix, generation)

    def computed_by(self, who: str) -> str:
        return layout.computed_by(self.prefix, who)

    @property
    def published(self) -> str:
        return layout.published(self.prefix)

    @property
    def lease(self) -> str:
        return layout.lease(self.prefix)


def read_record(store: Store, digest: str) -> dict[str, Any]:
    """A small JSON record (a client's, a holder's, an average's) by its digest."""
    value = store.recall_digest(digest)
    if not isinstance(value, dict):
        raise RoundError(f"record {digest} is a {type(value).__name__}, not a record")
    return value


def _latest(store: Store, place: Place) -> tuple[str, str] | None:
    """The latest claim's name (the first claim, or the last takeover) and digest, if any."""
    generations = [n[len(place.takeovers) :] for n in store.bound(place.takeovers)]
    latest = max((int(g) for g in generations if g.isdigit()), default=0)
    name = place.takeover(latest) if latest else place.claimed
    digest = store.resolve(name)
    return None if digest is None else (name, digest)


def current_holder(store: Store, place: Place) -> tuple[str, dict[str, Any]] | None:
    """The latest claim on the work (the first claim, or the last takeover), if any."""
    latest = _latest(store, place)
    return None if latest is None else (latest[0], read_record(store, latest[1]))


def _generation(store: Store, place: Place, who: str) -> int:
    """The latest generation `who` claimed at the place (0: the first claim)."""
    mine = [
        int(n[len(place.takeovers) :])
        for n in store.bound(place.takeovers)
        if n[len(place.takeovers) :].isdigit() and store.resolve(n) == who
    ]
    return max(mine, default=0)


def computations(store: Store, place: Place) -> int:
    """How many times the work was actually computed here (1 when all went well)."""
    return len(store.bound(place.computed))


def _claim(store: Store, place: Place, who: str, *, check_holder: bool) -> bool:
    """Claim the work, or take it over from a holder that is provably gone.

    A name seen taken is not claimed again (that would be a temporary written and removed at
    every poll); the claim itself stays the one atomic operation. Whether the holder is gone
    is asked only when `check_holder` (it may cost a squeue).
    """

    def proven(name: str, digest: str) -> bool:
        return holders.gone(read_record(store, digest))

    return _claim_judged(store, place, who, gone=proven if check_holder else None)


def _claim_judged(
    store: Store, place: Place, who: str, *, gone: Callable[[str, str], bool] | None
) -> bool:
    """Claim the work, or take it over from a holder that `gone(name, digest)` (of the
    latest claim) says is gone; None: do not ask."""
    if store.resolve(place.claimed) is None and store.claim(place.claimed, who):
        return True
    if gone is None:
        return False
    latest = _latest(store, place)
    if latest is None or not gone(*latest):
        return False
    name, _ = latest
    generation = 1 if name == place.claimed else int(name.rsplit("/", 1)[1]) + 1
    return store.claim(place.takeover(generation), who)


def publish(store: Store, name: str, digest: str) -> None:
    """Claimed, not bound: published once, never rebound to another digest."""
    store.claim(name, digest)


# Seconds between asking whether the work's holder is gone: it may run squeue or sacct, and
# every waiting process asks, so not at every poll.
HOLDER_CHECK_EVERY = 10.0


class Work(Protocol[T]):
    """One piece of work to do exactly once, as `once` asks about it."""

    what: str  # how messages name it, e.g. "round 3 of run 'cifar'"

    def done(self) -> str | None:
        """An answer already there before any input is read (a late arrival's shortcut)."""

    def ready(self, past: bool) -> T | None:
        """The inputs once they are all there (or, `past` the deadline, once enough are
        there to go on without the rest), else None."""

    def check(self, inputs: T) -> None:
        """Refuse what cannot be computed, naming the culprit; before anything is claimed."""

    def place(self, inputs: T) -> Place:
        """Where the work on exactly these inputs is claimed and published."""

    def compute(self, inputs: T, me: dict[str, Any]) -> str:
        """The work itself, by whoever won the claim; the digest of what it produced."""

    # Optionally, `share(inputs, me)`: work any process that finds the inputs ready may do
    # before claiming (a tree's partial means, spread among them all; see soma.round.tree). It
    # must be safe to run in many processes at once, and leave `compute` less to do.

    def settle(self, published: str) -> str:
        """What the caller leaves with, given the digest the place published."""

    def missing(self) -> tuple[list[int], str]:
        """Who is still awaited, and anything else the deadline's message should say."""

    # Optionally, `awaited()`: whom a waiting line names while the inputs are not ready (see
    # soma.round.waiting), e.g. the missing clients by site; else `missing()` says it.

    # Optionally, `nouns`: how messages name what it publishes and the work itself (a tree
    # node's ("partial mean", "node")); else ("average", "averaging").


def once(
    store: Store,
    work: Work[T],
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
    sleep: Callable[[float], None] = time.sleep,
    lease: float,
    signing: Signing | None = None,
    site: str | None = None,
) -> str:
    """What `work` settles on, computed here if this process wins the claim.

    Waits until the work is ready; checks it (every process does, so a refusal reaches them
    all, and nothing is claimed); then whoever gets the claim computes and publishes, and
    everyone else waits for what was published. A holder that is provably gone is taken
    over; one that may be alive is waited for. Past `deadline` seconds (None: forever), a
    RoundIncomplete names who never came, or an AveragerDied names who claimed and never
    published. On a store with compare-and-swap the holder is judged by its lease of `lease`
    seconds instead, and `signing` (a roster) signs and checks its records there.

    While it waits it says so at intervals (soma.round.waiting), naming whom it waits for:
    the inputs' missing clients, or the holder of the claim, by its record. `site` is this
    process's (config `site`), written in its holder record so that the others name it so.
    """
    leasing = leases.leased(store)
    watch = leases.Watch(store, signing, lease) if leasing else None
    started = time.monotonic()
    delays = backoff.delays()
    me = holders.me(role="averaging", what=work.what, site=site)
    waiting = Waiting(work.what)
    who: str | None = None
    checked: T | None = None
    place: Place | None = None
    shared = False
    ready_since: float | None = None
    next_holder_check = started
    while True:
        answer = work.done()
        if answer is not None:
            return answer
        now = time.monotonic()
        past = deadline is not None and now - started > deadline
        inputs = work.ready(past)
        if inputs is not None:
            ready_since = now if ready_since is None else ready_since
            if checked is None or inputs != checked:
                work.check(inputs)
                checked, place, shared = inputs, work.place(inputs), False
                who = None if leasing else who  # signed for its place there
            assert place is not None
            published = store.resolve(place.published)
            if published is not None:
                return work.settle(published)
            share = getattr(work, "share", None)
            if callable(share) and not shared:
                share(inputs, me)
                shared = True
                published = store.resolve(place.published)
                if published is not None:
                    return work.settle(published)
            # a holder is asked after at the deadline too, so that one that died since the
            # last check is taken over there, never reported as one that may be alive
            at_deadline = deadline is not None and now - ready_since > deadline
            check_holder = now >= next_holder_check or at_deadline
            if check_holder:
                next_holder_check = now + HOLDER_CHECK_EVERY
            if who is None or check_holder:  # a re-put refreshes it: no grace runs out
                who = (  # under an averager that waits (soma.health)
                    leases.put_holder(store, signing, place.prefix, me)
                    if leasing
                    else store.put_value(me)
                )
            if watch is not None:  # its lease, looked at every poll, is all a holder proves
                settled = _leased(store, work, inputs, place, me, who, watch, lease, signing)
                if settled is not None:
                    return work.settle(settled)
            elif _claim(store, place, who, check_holder=check_holder):
                digest = _computed(work, inputs, me)
                with store.group():  # its names made durable in one pass (soma.files)
                    store.bind(place.computed_by(who), who)
                    publish(store, place.published, digest)
                    return work.settle(store.resolve(place.published) or digest)
            # the averaging gets a whole deadline from when the round was ready, so that a
            # round going on with its quorum at the deadline is not called dead at once
            if at_deadline:
                _raise_holder_died(store, place, work, deadline)
            waiting.tick(_holder_awaited, store, place, work)
        elif past:
            _raise_incomplete(work, deadline)
        else:
            waiting.tick(_inputs_awaited, work)
        sleep(next(delays))


def _computed(work: Work[T], inputs: T, me: dict[str, Any]) -> str:
    """The claimed work computed here; Slurm's signal before the job's time limit ends it
    (soma.slurm.time_limit): a holder that has ended is taken over at once, where one killed at
    the limit minutes later would have held everyone waiting on it until then."""
    with raised_at_time_limit(held_reason(work.what)):
        return work.compute(inputs, me)


def _inputs_awaited(work: Work) -> str:
    """Whom a waiting line names while the inputs are not all there."""
    awaited = getattr(work, "awaited", None)
    if callable(awaited):
        return str(awaited())
    missing, detail = work.missing()
    return f"{clients(missing)}{detail}"


def _nouns(work: Work) -> tuple[str, str]:
    """How messages name what `work` publishes, and the work itself."""
    result, task = getattr(work, "nouns", ("average", "averaging"))
    return str(result), str(task)


def _holder_awaited(store: Store, place: Place, work: Work) -> str:
    """Whom a waiting line names once the inputs are there: whoever holds the claim."""
    result, task = _nouns(work)
    latest = current_holder(store, place)
    if latest is None:
        return f"the {result}, its {task} not claimed yet"
    return f"the {result}, claimed by {holders.describe(latest[1])}"


def _leased(
    store: Store,
    work: Work[T],
    inputs: T,
    place: Place,
    me: dict[str, Any],
    who: str,
    watch: leases.Watch,
    seconds: float,
    signing: Signing | None,
) -> str | None:
    """One turn where claims come with leases (soma.round.lease): claim, or take over a
    holder whose lease ran out; compute while renewing it; publish only if it is still ours.
    The digest published, or None to wait on (a late holder waits for its successor's)."""

    def gone(name: str, digest: str) -> bool:
        return watch.gone(place.prefix, name, digest)

    won = _claim_judged(store, place, who, gone=gone)
    if watch.published is not None:  # its holder swapped its lease to it, then stopped
        publish(store, place.published, watch.published)
        return store.resolve(place.published)
    if not won:
        return None
    generation = _generation(store, place, who)
    held = leases.acquire(store, signing, place.prefix, who, generation, seconds)
    if held is None:  # a later generation holds the lease: this claim is late
        return None
    if isinstance(held, str):  # its last holder published that, then stopped
        publish(store, place.published, held)
        return store.resolve(place.published)
    try:
        digest = _computed(work, inputs, me)
    finally:
        held.stop()
    store.bind(place.computed_by(who), who)  # computed, whether or not it is published
    if held.finish(digest):
        publish(store, place.published, digest)
    return store.resolve(place.published)


def _raise_incomplete(work: Work, deadline: float) -> None:
    missing, detail = work.missing()
    raise RoundIncomplete(
        f"{work.what} is incomplete after {deadline:g}s: "
        f"client{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} never came"
        f"{detail}",
        missing,
    )


def _raise_holder_died(store: Store, place: Place, work: Work, deadline: float) -> None:
    latest = current_holder(store, place)
    holder = latest[1] if latest else {}
    result, task = _nouns(work)
    raise AveragerDied(
        f"{work.what} is complete, but no {result} after {deadline:g}s: "
        f"the {task} was claimed by {holders.describe(holder)} and never published; "
        "whoever claimed it died holding it, and nobody else will try while it may be alive",
        holder,
    )
