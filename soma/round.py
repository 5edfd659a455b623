"""A federated round on a shared folder, with nobody in charge.

A round, in the store (`p` is `<run>/round/<r>`):

    p/client/<k>        what client k learnt: its weights' digest and its size (a record)
    p/averaging         who is doing the mean (claimed, so exactly one)
    p/takeover/<g>      who took the averaging over from a holder proven gone (claimed too)
    p/averaged/<who>    one entry per averaging actually computed: the store's own count
    p/average           the mean's record (claimed as well: published once, never rebound)

Weights are kept as values of their own (`Store.put_value(export)`, node by node), and
records refer to them by digest, so the weights' digest is their identity: the same weights
are the same digest in any process, and a record is a few hundred bytes of JSON that a
waiting client reads without touching a tensor.

Whoever finds the round complete claims the averaging; exactly one can win, because that is
what a claim is. The winner streams the clients' weights out of the store into `fedavg`
(one model in memory, whatever the number of clients), weighted by their sizes, and
publishes the average, whose record names what it came from: each client's record, weights
and size, and who averaged. That is the round's identity.

The workflow averages the exact weights its client jobs reported instead (`average_inputs`):
its averaging lives under `p/inputs/<key>/`, where the key is the digest of those inputs, so
a round rerun with different weights is a different averaging, and one rerun with the same
weights finds the average it already had.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from soma import codecs, holders
from soma.aggregate import fedavg
from soma.errors import SomaError
from soma.nodes import Export
from soma.store import Store


class RoundError(SomaError):
    """A round cannot go on as asked."""


class RoundIncomplete(RoundError, TimeoutError):
    """Somebody is missing: clients that never came."""

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


class AveragerDied(RoundError, TimeoutError):
    """Nobody is missing, yet no average: whoever claimed the averaging died holding it."""

    def __init__(self, message: str, holder: dict[str, Any]) -> None:
        super().__init__(message)
        self.holder = holder


def round_prefix(run: str, round: int) -> str:
    return f"{run}/round/{round}"


def client_name(run: str, round: int, client: int) -> str:
    return f"{round_prefix(run, round)}/client/{client}"


def average_name(run: str, round: int) -> str:
    return f"{round_prefix(run, round)}/average"


def averaging_name(run: str, round: int) -> str:
    return f"{round_prefix(run, round)}/averaging"


@dataclass(frozen=True)
class Input:
    """One client's part in an average: its index, its weights' digest, its size."""

    client: int
    weights: str
    size: float | None
    record: str | None = None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_round(run: str, round: int, clients: int, mine: int | None = None) -> None:
    if not isinstance(run, str) or not run or "/round/" in f"/{run}/":
        raise RoundError(f"run name {run!r} must be non-empty text without a 'round' segment")
    if not _is_int(round) or round < 0:
        raise RoundError(f"round {round!r} must be an integer >= 0")
    if not _is_int(clients) or clients < 1:
        raise RoundError(f"clients {clients!r} must be an integer >= 1")
    if mine is not None and (not _is_int(mine) or not 0 <= mine < clients):
        raise RoundError(f"client {mine!r} is not one of the round's clients 0..{clients - 1}")


def _check_size(size: object, client: int) -> None:
    if size is not None and (
        isinstance(size, bool) or not isinstance(size, (int, float)) or not size >= 0
    ):
        raise RoundError(f"client {client}: size {size!r} must be a number >= 0")


@dataclass(frozen=True)
class Contribution:
    record: str  # the digest of the client's record
    weights: str  # the digest of its weights


def contribute(
    store: Store,
    export: Export,
    *,
    run: str,
    round: int,
    clients: int,
    mine: int,
    size: float | None = None,
) -> Contribution:
    """Write what client `mine` learnt, and its size, to the round."""
    _check_round(run, round, clients, mine)
    _check_size(size, mine)
    weights = store.put_value(export)
    record = {"client": mine, "size": size, "weights": weights, "by": holders.me()}
    return Contribution(store.keep(client_name(run, round, mine), record), weights)


@dataclass(frozen=True)
class Backoff:
    """Polling a shared folder: start quick, double, stay at a small cap (about a second).

    Each poll of a round costs one directory listing of `client/` and one lookup of the
    average (a few metadata calls on NFS; no blob is read), so a waiting client costs about
    two metadata calls a second once it has reached the cap.
    """

    first: float = 0.01
    cap: float = 1.0

    def delays(self) -> Iterator[float]:
        delay = self.first
        while True:
            yield delay
            delay = min(delay * 2, self.cap)


def present(store: Store, run: str, round: int, clients: int) -> list[int]:
    """The clients whose records are in the round, sorted."""
    prefix = f"{round_prefix(run, round)}/client/"
    found = []
    for name in store.bound(prefix):
        tail = name[len(prefix) :]
        if tail.isdigit() and int(tail) < clients:
            found.append(int(tail))
    return sorted(found)


def read_record(store: Store, digest: str) -> dict[str, Any]:
    """A small JSON record (a client's, a holder's, an average's) by its digest."""
    value = store.recall_digest(digest)
    if not isinstance(value, dict):
        raise RoundError(f"record {digest} is a {type(value).__name__}, not a record")
    return value


def _inputs_of_round(store: Store, run: str, round: int, here: list[int]) -> list[Input]:
    """Each present client's weights and size, as its record says."""
    inputs = []
    for k in here:
        digest = store.resolve(client_name(run, round, k))
        record = read_record(store, digest)
        inputs.append(Input(k, record["weights"], record["size"], digest))
    return inputs


def _check_sizes(inputs: Sequence[Input], where: str) -> list[float] | None:
    """All of a round's clients say a size, or none does; a mix is refused, naming who."""
    said = [i.client for i in inputs if i.size is not None]
    if said and len(said) != len(inputs):
        silent = [i.client for i in inputs if i.size is None]
        raise RoundError(
            f"{where}: clients {said} said a size and clients {silent} did not; "
            "all of a round's clients say a size, or none does"
        )
    return [i.size for i in inputs] if said else None


class _Place:
    """Where one averaging happens: its claim, takeovers, audit and published average."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.averaging = f"{prefix}/averaging"
        self.takeovers = f"{prefix}/takeover/"
        self.averaged = f"{prefix}/averaged/"
        self.average = f"{prefix}/average"


def current_holder(
    store: Store, run: str, round: int, *, key: str | None = None
) -> tuple[str, dict[str, Any]] | None:
    """The latest claim on the averaging (the first claim, or the last takeover), if any."""
    return _current_holder(store, _place(run, round, key))


def _place(run: str, round: int, key: str | None) -> _Place:
    prefix = round_prefix(run, round)
    return _Place(prefix if key is None else f"{prefix}/inputs/{key}")


def _current_holder(store: Store, place: _Place) -> tuple[str, dict[str, Any]] | None:
    generations = [n[len(place.takeovers) :] for n in store.bound(place.takeovers)]
    latest = max((int(g) for g in generations if g.isdigit()), default=0)
    name = f"{place.takeovers}{latest}" if latest else place.averaging
    digest = store.resolve(name)
    return None if digest is None else (name, read_record(store, digest))


def _claim_averaging(store: Store, place: _Place, who: str, *, check_holder: bool) -> bool:
    """Claim the averaging, or take it over from a holder that is provably gone.

    A name seen taken is not claimed again (that would be a temporary written and removed at
    every poll); the claim itself stays the one atomic operation. Whether the holder is gone
    is asked only when `check_holder` (it may cost a squeue).
    """
    if store.resolve(place.averaging) is None and store.claim(place.averaging, who):
        return True
    if not check_holder:
        return False
    latest = _current_holder(store, place)
    if latest is None or not holders.gone(latest[1]):
        return False
    name, _ = latest
    generation = 1 if name == place.averaging else int(name.rsplit("/", 1)[1]) + 1
    return store.claim(f"{place.takeovers}{generation}", who)


def _weights(sizes: list[float] | None) -> list[float] | None:
    """What fedavg weighs the clients by: their sizes (None: equal weights)."""
    return sizes


def _publish(store: Store, name: str, digest: str) -> None:
    """The average is claimed, not bound: published once, never rebound to another digest."""
    store.claim(name, digest)


def _compute_and_publish(
    store: Store,
    place: _Place,
    run: str,
    round: int,
    inputs: list[Input],
    me: dict[str, Any],
    who: str,
) -> str:
    sizes = _weights(_check_sizes(inputs, f"round {round} of run {run!r}"))
    exports = store.recall_each_digest([i.weights for i in inputs], lazy=True)
    if sizes is None:
        mean = fedavg(exports)
    else:
        mean = fedavg(zip(exports, sizes, strict=True))
    store.bind(f"{place.averaged}{who[:16]}", who)
    record = {
        "run": run,
        "round": round,
        "weights": store.put_value(mean),
        "inputs": [
            {"client": i.client, "weights": i.weights, "size": i.size, "record": i.record}
            for i in inputs
        ],
        "averaged_by": me,
    }
    digest = store.put_value(record)
    _publish(store, place.average, digest)
    return store.resolve(place.average) or digest


# Seconds between asking whether the averaging's holder is gone: it may run squeue or sacct,
# and every waiting client asks, so not at every poll.
HOLDER_CHECK_EVERY = 10.0


def _complete(here: list[int], clients: int) -> bool:
    """The round is complete when every client is there; nobody goes on without one."""
    return len(here) == clients


def _wait(
    store: Store,
    place: _Place,
    *,
    run: str,
    round: int,
    clients: int,
    ready: Callable[[], list[Input] | None],
    waiting_for: Callable[[], list[int]],
    deadline: float | None,
    backoff: Backoff,
    sleep: Callable[[float], None],
) -> str:
    started = time.monotonic()
    delays = backoff.delays()
    me = holders.me(role="averaging", run=run, round=round)
    who = store.put_value(me)
    next_holder_check = started
    while True:
        published = store.resolve(place.average)
        if published is not None:
            return published
        inputs = ready()
        if inputs is not None:
            check_holder = time.monotonic() >= next_holder_check
            if check_holder:
                next_holder_check = time.monotonic() + HOLDER_CHECK_EVERY
            if _claim_averaging(store, place, who, check_holder=check_holder):
                return _compute_and_publish(store, place, run, round, inputs, me, who)
        if deadline is not None and time.monotonic() - started > deadline:
            _raise_past_deadline(store, place, run, round, clients, waiting_for(), deadline)
        sleep(next(delays))


def average_round(
    store: Store,
    *,
    run: str,
    round: int,
    clients: int,
    deadline: float | None = 3600.0,
    backoff: Backoff = Backoff(),
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Make sure round `round` has an average; the digest of its record.

    Waits for every client; then whoever gets the claim averages and publishes, and everyone
    else waits for what was published. A holder that is provably gone (its Slurm job ended,
    or on this host its process is gone) is taken over; one that may be alive is waited for.
    `deadline` is seconds of waiting (None: forever); past it, a RoundIncomplete names the
    clients that never came, or an AveragerDied names who claimed the averaging and never
    published. Going on without somebody is a policy, and not this function's to make.
    """
    _check_round(run, round, clients)

    def ready() -> list[Input] | None:
        here = present(store, run, round, clients)
        return _inputs_of_round(store, run, round, here) if _complete(here, clients) else None

    def missing() -> list[int]:
        here = present(store, run, round, clients)
        return [k for k in range(clients) if k not in here]

    return _wait(
        store,
        _place(run, round, None),
        run=run,
        round=round,
        clients=clients,
        ready=ready,
        waiting_for=missing,
        deadline=deadline,
        backoff=backoff,
        sleep=sleep,
    )


def inputs_key(inputs: Sequence[Input]) -> str:
    """The digest of what an averaging is made of: each client's index, weights and size."""
    listed = [[i.client, i.weights, i.size] for i in sorted(inputs, key=lambda i: i.client)]
    return hashlib.sha256(codecs.canonical_json(listed)).hexdigest()


def average_inputs(
    store: Store,
    inputs: Sequence[Input],
    *,
    run: str,
    round: int,
    deadline: float | None = 3600.0,
    backoff: Backoff = Backoff(),
) -> str:
    """Average exactly these clients' weights for round `round`, once; the record's digest.

    What the workflow's averaging job calls: its inputs are what its client jobs reported.
    A second job with the same inputs (a retry, another snakemake sharing the store) finds
    the claim taken and waits for, then reuses, the published average.
    """
    inputs = sorted(inputs, key=lambda i: i.client)
    if not inputs:
        raise RoundError(f"round {round} of run {run!r}: nothing to average")
    _check_round(run, round, len(inputs))
    for i in inputs:
        _check_size(i.size, i.client)
        if not store.blob_path(i.weights).exists():
            raise RoundError(f"client {i.client}: weights {i.weights} are not in the store")
    _check_sizes(inputs, f"round {round} of run {run!r}")
    return _wait(
        store,
        _place(run, round, inputs_key(inputs)),
        run=run,
        round=round,
        clients=len(inputs),
        ready=lambda: list(inputs),
        waiting_for=list,
        deadline=deadline,
        backoff=backoff,
        sleep=time.sleep,
    )


def _raise_past_deadline(
    store: Store,
    place: _Place,
    run: str,
    round: int,
    clients: int,
    missing: list[int],
    deadline: float,
) -> None:
    if missing:
        raise RoundIncomplete(
            f"round {round} of run {run!r} is incomplete after {deadline:g}s: "
            f"client{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} never came "
            f"({clients - len(missing)} of {clients} wrote)",
            missing,
        )
    latest = _current_holder(store, place)
    holder = latest[1] if latest else {}
    raise AveragerDied(
        f"round {round} of run {run!r} is complete, but no average after {deadline:g}s: "
        f"the averaging was claimed by {holders.describe(holder)} and never published; "
        "whoever claimed it died holding it, and nobody else will try while it may be alive",
        holder,
    )


def weights_of_average(store: Store, digest: str) -> Export:
    """The mean weights an average record (by digest) names."""
    return store.recall_digest(read_record(store, digest)["weights"])


def gather(
    store: Store,
    export: Export,
    *,
    run: str,
    round: int,
    clients: int,
    mine: int,
    size: float | None = None,
    deadline: float | None = 3600.0,
    backoff: Backoff = Backoff(),
) -> Export:
    """The round barrier: write mine, wait for all, one of us averages, all leave with the mean.

    The same call on every client. A client arriving after the average exists finds it and
    does not wait; the only client of a round averages it itself.
    """
    contribute(store, export, run=run, round=round, clients=clients, mine=mine, size=size)
    digest = average_round(
        store, run=run, round=round, clients=clients, deadline=deadline, backoff=backoff
    )
    return weights_of_average(store, digest)
