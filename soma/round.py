"""A federated round on a shared folder, with nobody in charge.

A round, in the store:

    <run>/round/<r>/client/<k>       what client k learnt, its size in the record
    <run>/round/<r>/averaging        who is doing the mean (claimed, so exactly one)
    <run>/round/<r>/takeover/<g>     who took the averaging over from a holder proven gone
    <run>/round/<r>/averaged/<who>   one line per averaging actually computed (an audit)
    <run>/round/<r>/average          the mean (claimed too: published once, never rebound)

Whoever finds the round complete claims the averaging; exactly one can win, because that is
what a claim is. The winner streams the clients' exports out of the store into `fedavg`,
weighted by their sizes, and publishes the average, whose record names what it came from:
each client's record digest and size, and who averaged. That is the round's identity.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from soma import codecs, holders
from soma.aggregate import fedavg
from soma.errors import SomaError
from soma.nodes import Export


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


def _check_round(run: str, round: int, clients: int, mine: int | None = None) -> None:
    if not isinstance(run, str) or not run or "/round/" in f"/{run}/":
        raise RoundError(f"run name {run!r} must be non-empty text without a 'round' segment")
    if isinstance(round, bool) or not isinstance(round, int) or round < 0:
        raise RoundError(f"round {round!r} must be an integer >= 0")
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise RoundError(f"clients {clients!r} must be an integer >= 1")
    if mine is not None and (
        isinstance(mine, bool) or not isinstance(mine, int) or not 0 <= mine < clients
    ):
        raise RoundError(f"client {mine!r} is not one of the round's clients 0..{clients - 1}")


def contribute(
    store,
    export: Export,
    *,
    run: str,
    round: int,
    clients: int,
    mine: int,
    size: float | None = None,
) -> str:
    """Write what client `mine` learnt, and its size, to the round. Returns the record's digest."""
    _check_round(run, round, clients, mine)
    if size is not None and (
        isinstance(size, bool) or not isinstance(size, (int, float)) or size < 0
    ):
        raise RoundError(f"client {mine}: size {size!r} must be a number >= 0")
    record = {"client": mine, "size": size, "export": export, "by": holders.me()}
    return store.keep(client_name(run, round, mine), record)


@dataclass(frozen=True)
class Backoff:
    """Polling a shared folder: start quick, double, stay at a small cap (about a second).

    Each poll of a round costs one directory listing of `client/` plus one lookup of the
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


def present(store, run: str, round: int, clients: int) -> list[int]:
    """The clients whose records are in the round, sorted."""
    prefix = f"{round_prefix(run, round)}/client/"
    found = []
    for name in store.bound(prefix):
        tail = name[len(prefix) :]
        if tail.isdigit() and int(tail) < clients:
            found.append(int(tail))
    return sorted(found)


def _sizes(store, run: str, round: int, here: list[int]) -> tuple[list[str], list[float] | None]:
    """Each client's record digest, and their sizes: all say a size, or none does."""
    digests, sizes = [], []
    for k in here:
        digest = store.resolve(client_name(run, round, k))
        digests.append(digest)
        sizes.append(_plain_field(store, digest, "size"))
    said = [k for k, s in zip(here, sizes, strict=True) if s is not None]
    if said and len(said) != len(here):
        silent = [k for k, s in zip(here, sizes, strict=True) if s is None]
        raise RoundError(
            f"round {round} of run {run!r}: clients {said} said a size and clients {silent} "
            "did not; all of a round's clients say a size, or none does"
        )
    return digests, (sizes if said else None)


def _plain_field(store, digest: str, field: str) -> Any:
    """A JSON field of a record, read from the record blob alone (no tensor blob is touched)."""
    tree, _ = codecs.parse_record(store.get(digest), str(store.blob_path(digest)))
    if not isinstance(tree, dict) or field not in tree:
        raise RoundError(f"record {digest} is not a client's record: it has no {field!r}")
    return tree[field]


def _holder(store, name: str) -> dict[str, Any] | None:
    digest = store.resolve(name)
    return None if digest is None else store.recall_digest(digest)


def current_holder(store, run: str, round: int) -> tuple[str, dict[str, Any]] | None:
    """The latest claim on the averaging (the first claim, or the last takeover)."""
    prefix = f"{round_prefix(run, round)}/takeover/"
    takeovers = sorted(
        int(n[len(prefix) :]) for n in store.bound(prefix) if n[len(prefix) :].isdigit()
    )
    name = f"{prefix}{takeovers[-1]}" if takeovers else averaging_name(run, round)
    holder = _holder(store, name)
    return None if holder is None else (name, holder)


def _claim_averaging(store, run: str, round: int, me: dict[str, Any]) -> bool:
    """Claim the averaging, or take it over from a holder that is provably gone."""
    who = store.put_value(me)
    if store.claim(averaging_name(run, round), who):
        return True
    latest = current_holder(store, run, round)
    if latest is None or not holders.gone(latest[1]):
        return False
    name, _ = latest
    generation = 1 if name == averaging_name(run, round) else int(name.rsplit("/", 1)[1]) + 1
    return store.claim(f"{round_prefix(run, round)}/takeover/{generation}", who)


def _compute_and_publish(store, run: str, round: int, here: list[int], me: dict[str, Any]) -> str:
    digests, sizes = _sizes(store, run, round, here)
    records = store.recall_each_digest(digests, lazy=True)
    weights = _weights(sizes)
    if weights is None:
        mean = fedavg(record["export"] for record in records)
    else:
        mean = fedavg(
            (record["export"], size) for record, size in zip(records, weights, strict=True)
        )
    who = store.put_value(me)
    store.bind(f"{round_prefix(run, round)}/averaged/{who[:16]}", who)
    record = {
        "round": round,
        "run": run,
        "export": mean,
        "inputs": [
            {"client": k, "record": digest, "size": None if sizes is None else size}
            for k, digest, size in zip(here, digests, sizes or [None] * len(here), strict=True)
        ],
        "averaged_by": me,
    }
    digest = store.put_value(record)
    _publish(store, average_name(run, round), digest)
    return store.resolve(average_name(run, round)) or digest


def _complete(here: list[int], clients: int) -> bool:
    """The round is complete when every client is there; nobody goes on without one."""
    return len(here) == clients


def _weights(sizes: list[float] | None) -> list[float] | None:
    """What fedavg weighs the clients by: their sizes (None: equal weights)."""
    return sizes


def _publish(store, name: str, digest: str) -> None:
    """The average is claimed, not bound: published once, never rebound to another digest."""
    store.claim(name, digest)


def average_round(
    store,
    *,
    run: str,
    round: int,
    clients: int,
    deadline: float | None = 3600.0,
    backoff: Backoff = Backoff(),
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Make sure round `round` has an average, and return its record's digest.

    Waits for every client; then whoever gets the claim averages and publishes, and everyone
    else waits for what was published. A holder that is provably gone (its Slurm job ended,
    or on this host its process is gone) is taken over; one that may be alive is waited for.
    `deadline` is seconds of waiting (None: forever); past it, a RoundIncomplete names the
    clients that never came, or an AveragerDied names who claimed the averaging and never
    published. Going on without somebody is a policy, and not this function's to make.
    """
    _check_round(run, round, clients)
    started = time.monotonic()
    delays = backoff.delays()
    me = holders.me(role="averaging", round=round)
    while True:
        published = store.resolve(average_name(run, round))
        if published is not None:
            return published
        here = present(store, run, round, clients)
        if _complete(here, clients) and _claim_averaging(store, run, round, me):
            return _compute_and_publish(store, run, round, here, me)
        if deadline is not None and time.monotonic() - started > deadline:
            _raise_past_deadline(store, run, round, clients, here, deadline)
        sleep(next(delays))


def _raise_past_deadline(
    store, run: str, round: int, clients: int, here: list[int], deadline: float
) -> None:
    missing = [k for k in range(clients) if k not in here]
    if missing:
        raise RoundIncomplete(
            f"round {round} of run {run!r} is incomplete after {deadline:g}s: "
            f"client{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} never came "
            f"({len(here)} of {clients} wrote)",
            missing,
        )
    latest = current_holder(store, run, round)
    holder = latest[1] if latest else {}
    raise AveragerDied(
        f"round {round} of run {run!r} is complete, but no average after {deadline:g}s: "
        f"the averaging was claimed by {holders.describe(holder)} and never published; "
        "whoever claimed it died holding it, and nobody else will try while it may be alive",
        holder,
    )


def gather(
    store,
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
    return store.recall_digest(digest)["export"]
