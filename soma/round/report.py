"""What a run's rounds look like, for `soma status`: per round and meeting who was expected,
who came, dropped out or is missing, who averages, the average, its privacy spent and its
evaluations; and the runs and meetings a store holds.

Kept apart because it only reads what the others write. (Not `status.py`: `soma.round.status`
is the function.) It reads records (JSON), never a tensor, and imports no torch for a run of
rounds whose strategy keeps no state (FedAvg) or keeps a JSON account (DP-FedAvg, whose module
imports its tensor arithmetic on first use): the meetings of a round that differ
(soma.round.conflicts) and a strategy (for its privacy spent) are imported where a run has them
(tests/cli/test_torch_free.py, tests/cli/test_status_torch_free.py). A distributed-DP release
(`<meeting>/release/<k>`, soma.round.client) is read as what it is: who released, and whether
each client's record is the release it claimed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from soma.errors import SomaError
from soma.round import holders, layout, once, readers, records
from soma.round.once import Place, RoundError, current_holder, read_record
from soma.round.signing import Signing
from soma.slurm import cost
from soma.store import Store
from soma.store.errors import StoreError

if TYPE_CHECKING:
    from soma.strategies import Strategy


class UnknownRun(RoundError):
    """A run the store holds nothing of; the message lists the runs it does hold."""


def runs(store: Store) -> list[str]:
    """The runs with rounds in the store. A run's name may hold '/' but never a 'round'
    segment (see Meeting), so the first `round/<digits>` in a name ends the run's name."""
    return layout.runs(store.bound())


def summary(store: Store, run: str) -> dict[str, Any]:
    """A run of rounds in one row, for `soma status` without --run: how many rounds it has,
    how many are averaged, the last averaged round, when it was averaged (`when`, UTC, as its
    averager's record says) and its average's weights digest (the digest every mode prints
    for the same weights: `soma client`, `soma simulate`, the workflow's receipts). Read as
    the store says, signatures unchecked (that is `--run R --roster F`'s): `signed` says
    whether the last round says the run has a roster; a record that cannot be read is the
    row's `problem`."""
    found = meetings(store, run)
    row: dict[str, Any] = {"run": run, "kind": "rounds", "rounds": len({r for r, _ in found})}
    row.update(averaged=0, last=None, weights=None, when=None, signed=False, problem=None)
    averaged = []
    for r, key in found:
        digest = store.resolve(layout.average(layout.meeting(run, r, key)))
        if digest is not None:
            averaged.append((r, key, digest))
    row["averaged"] = len({r for r, _, _ in averaged})
    if averaged:
        row["last"], key, digest = max(averaged)
        row["signed"] = readers.says_roster(store, run, [(row["last"], key)])
        try:
            record = records.read_average(store, digest)
            row["weights"] = record.weights
            row["when"] = _when(record.averaged_by)
        except (SomaError, StoreError, OSError) as error:
            row["problem"] = f"cannot read round {row['last']}'s average record: {error}"
    return row


def _when(by: object) -> str | None:
    """When an averager's record (soma.round.holders.me) says it was made, or None."""
    when = by.get("when") if isinstance(by, dict) else None
    return when if isinstance(when, str) else None


def meetings(store: Store, run: str) -> list[tuple[int, str]]:
    """Every (round, meeting key) of the run in the store, in round order."""
    return layout.meetings(store.bound(layout.rounds(run)), run)


def check_run(store: Store, run: str) -> list[tuple[int, str]]:
    """The run's meetings; or, when the store holds nothing of the run (no round and no
    start), an UnknownRun naming the runs it does hold: a mistyped name is told so, never
    shown as a run with no rounds."""
    names = store.bound(layout.rounds(run))
    found = layout.meetings(names, run)
    if not found and not layout.strays(names, run) and store.resolve(layout.start(run)) is None:
        held = runs(store)
        holds = f"the runs it holds: {', '.join(map(repr, held))}" if held else "it holds no runs"
        raise UnknownRun(f"no run {run!r} in the store at {store.directory} ({holds})")
    return found


def _refusal(entry: object) -> bool:
    """A left-out entry of an average whose client's input was refused (not a drop-out)."""
    return isinstance(entry, dict) and records.is_refused(entry.get("why"))


def evaluation_name(run: str, weights: str) -> str:
    """Where the workflow keeps the metrics of weights `weights` (`{"metrics", "weights"}`)."""
    return layout.evaluation(run, weights)


def status(
    store: Store,
    run: str,
    *,
    clients: int | None = None,
    signing: Signing | None = None,
    trusted: Collection[str] = (),
) -> list[dict[str, Any]]:
    """Per round and meeting: who was expected, who wrote, who dropped out and why (a
    drop-out's record is not a write), who is missing, who was left out and why, who
    averages, the average, how many averagings were computed, and the metrics the workflow
    recorded for the average's weights.

    `apart` is what tells the meeting from the other meetings of its round (see `labels`).
    Who was expected is what the meeting recorded; `clients` only where none is recorded
    (never guessed from the clients that wrote). A record or name that cannot be read (a
    corrupt blob, a name file that holds no digest, a client's record) is one of the row's
    `problems`, so that one bad round never hides the others; a name where a round's or a
    meeting's folder belongs (a planted link) is a row of its own, with no meeting, whose
    problem names it: never skipped. `left_out` is who the average went on without (drop-outs,
    never came), `refused` whose input the averaging refused, and why (records.is_refused).
    What the round cost (`_costs`): `cpu_s`, the CPU seconds its records' processes used
    since their records of the rounds before (without Slurm too), and `cost`, its Slurm
    jobs' core- and GPU-hours, queue wait and energy as sacct has them (None without Slurm).

    `signing` (the roster the reader was given): every client, average and federated
    evaluation record is checked signed (soma.round.readers); one that is not is `ignored`,
    with why, and nothing it says is shown. `signatures` says what was checked: "checked",
    "not checked" (the run's meetings say it has a roster and none was given), or None (the
    run has none). A strategy the records name is loaded (for its privacy spent) only when it
    is built in or the caller vouches for it in `trusted` (its own code's names): a name read
    from the store is never imported otherwise.
    """
    names = store.bound(layout.rounds(run))
    found = layout.meetings(names, run)
    apart = _labels(store, run, found)
    said = readers.says_roster(store, run, found)
    checked = "checked" if signing else "not checked" if said else None
    rows = [
        {
            **_status_row(store, run, r, key, clients, signing, trusted),
            "apart": apart[(r, key)],
            "signatures": checked,
        }
        for r, key in found
    ]
    for row in rows:  # what an ignored `about` says tells the meeting from nothing
        if any(x["name"].endswith("/about") for x in row.get("ignored") or []):
            row["apart"] = f"{row['meeting'][:8]}, its about record ignored"
    _costs(rows)
    rows += [_stray_row(store, run, name, clients) for name in layout.strays(names, run)]
    return sorted(rows, key=lambda row: (row["round"] is None, row["round"] or 0))


def _process(by: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return by.get("host"), by.get("pid"), by.get("pid_start")


def _cpu_spent(bys: Sequence[Mapping[str, Any]], seen: dict[tuple[Any, Any, Any], float]) -> Any:
    """The CPU seconds the processes of a round's records used for it: each one's `cpu_s`
    at its latest record of the round less that at its record of an earlier round (`seen`,
    updated), summed (a `soma simulate` is one process, each workflow job its own; a
    process's first record counts its start). None when no record says (older records)."""
    latest: dict[tuple[Any, Any, Any], float] = {}
    for by in bys:
        used = by.get("cpu_s")
        if isinstance(used, (int, float)) and not isinstance(used, bool):
            latest[_process(by)] = max(latest.get(_process(by), 0.0), float(used))
    spent = sum(max(0.0, used - seen.get(p, 0.0)) for p, used in latest.items())
    seen.update(latest)
    return round(spent, 3) if latest else None


def _job(by: Mapping[str, Any]) -> str | None:
    """The Slurm job a record's process ran in, as sacct names it (an array's task `123_7`)."""
    job = by.get("slurm_array") or by.get("slurm_job")
    return None if job in (None, "") else str(job)


def _costs(rows: list[dict[str, Any]]) -> None:
    """Each row's `cpu_s` and `cost` (see `status`), from the holder records its
    `_status_row` collected (`_by`: its clients' records' and its average's `by`), in round
    order. Slurm's accounting is asked once for every job of the run (soma.slurm.cost:
    a job that served several rounds is split among them); never required: without sacct,
    or when it fails, no row has a `cost`."""
    seen: dict[tuple[Any, Any, Any], float] = {}
    jobs: dict[int, set[str]] = {}
    for i, row in enumerate(rows):
        bys = [by for by in row.pop("_by", []) if isinstance(by, dict)]
        row["cpu_s"], row["cost"] = _cpu_spent(bys, seen), None
        named = {job for job in map(_job, bys) if job is not None}
        if named:
            jobs[i] = named
    if not jobs:
        return
    try:
        known = cost.sacct_costs(sorted({job for named in jobs.values() for job in named}))
    except (SomaError, OSError, subprocess.SubprocessError):  # never required
        return
    for i, summed in cost.by_round(jobs, known).items():
        rows[i]["cost"] = {**dataclasses.asdict(summed), "queue_share": summed.queue_share}


def _labels(store: Store, run: str, found: list[tuple[int, str]]) -> dict[tuple[int, str], str]:
    """soma.round.conflicts's labels of the meetings; "" each when no round has several, without
    importing soma.round.conflicts (a meeting's strategy: torch)."""
    rounds = [r for r, _ in found]
    if len(set(rounds)) == len(rounds):
        return dict.fromkeys(found, "")
    from soma.round.conflicts import labels

    return labels(store, run, found)


def privacy_spent(
    store: Store,
    record: Mapping[str, Any],
    strategy: Strategy | None = None,
    trusted: Collection[str] = (),
) -> dict[str, Any] | None:
    """The epsilon (and delta) spent up to this round, as its strategy reports it
    (`Strategy.privacy_spent`); `record` is an average's record or its workflow receipt
    (both name the strategy and the state), `strategy` the strategy when the record does
    not hold its options (a receipt). The state is read only for a strategy that reports
    privacy, as another's may be a model's worth of tensors.

    Without `strategy`, the record's name is loaded as any name read from the store is: a
    built-in only, never imported (soma.strategies.load_strategy), unless the caller vouches
    for it in `trusted`; None for another. A record that names no state has no account to
    read the privacy spent from (`Strategy.privacy_spent(state)`): None, its strategy not
    loaded (nor torch, for `soma status`)."""
    name = record.get("strategy") or "fedavg"
    state = record.get("state")
    if strategy is None and not state:
        return None
    from soma.strategies import (
        BUILTIN,
        REPORTS_PRIVACY,
        UntrustedStrategy,
        load_strategy,
        privacy_of,
    )

    builtin = next((b for b, module in BUILTIN.items() if name in (b, module)), None)
    if strategy is None and builtin is not None and builtin not in REPORTS_PRIVACY:
        return None  # a built-in that reports none: not loaded (a stateful one imports torch)
    if strategy is None:
        options = record.get("options") or {}
        try:
            strategy = load_strategy(name, options, trusted=name in trusted)
        except UntrustedStrategy:
            return None
    return privacy_of(name, strategy, lambda: None if not state else store.recall_digest(state))


def _federated(
    store: Store, prefix: str, weights: str, signing: Signing | None, ignored: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The round's federated evaluation of its average (soma.run.evaluation), once settled;
    with a roster, only when signed by a roster member (else it is `ignored`, saying why)."""
    name = layout.federated(prefix)
    digest = store.resolve(name)
    if digest is None:
        return None
    why = readers.refusal(
        store, signing, digest, name=name, writer=None, what="the federated evaluation record"
    )
    if why is not None:
        ignored.append({"record": digest, "name": name, "why": why})
        return None
    record = read_record(store, digest)
    if record.get("weights") != weights:
        return None  # the evaluation of an earlier average of the meeting: not this one's
    return {k: record.get(k) for k in ("evaluated", "size", "evaluation", "trained", "training")}


def _stray_row(store: Store, run: str, name: str, clients: int | None) -> dict[str, Any]:
    """A row for a name where a round's or a meeting's folder belongs: it cannot be read."""

    try:
        store.resolve(name)
        why = "it is a name, where a round's or a meeting's folder belongs"
    except (SomaError, StoreError, OSError) as error:
        why = str(error)
    r = layout.round_of(name, run)
    where = f"the rounds of run {run!r}" if r is None else f"round {r} of run {run!r}"
    row = _empty_row(r, None, clients)
    row.update(apart="", problems=[f"cannot read {name!r} ({where}): {why}"])
    return row


# The most clients a meeting's row lists (who was expected, who is missing): past it, an about
# record (a forged one: 10^7 clients cost 0.9 GB and 89 MB of output) is flagged, not listed.
LISTED = 100_000


def _releases(
    store: Store, prefix: str, clients: int | None
) -> tuple[dict[int, tuple[str, int]], list[str]]:
    """The meeting's distributed-DP releases (soma.round.client: each client's claimed once,
    its record the client's, `<meeting>/release/<k>`) by client, each with the client count
    that spells it as soma.round.layout does (a meeting's count unknown: either spelling,
    fanned out or not); and the names there that are no client's release."""
    found, strays = {}, []
    counts = (1, layout.FAN_OUT + 1) if clients is None else (clients,)
    for name in store.bound(layout.releases(prefix)):
        k = layout.release_of(name[len(prefix) + 1 :])
        spelled = [n for n in counts if k is not None and name == layout.release(prefix, k, n)]
        if spelled:
            found[k] = (name, spelled[0])
        else:
            strays.append(name)
    return found, strays


def _about_refusal(
    store: Store,
    signing: Signing | None,
    record: Mapping[str, Any],
    key: str,
    name: str,
    digest: str,
) -> str | None:
    """Why a meeting's about record is not to be believed: it is not the identity its meeting
    is keyed by (the key is the digest of that identity: soma.round.Meeting.key), or, with a
    roster, no roster member signed it. None when it is."""
    from soma.round.signing import SIGNED
    from soma.store.record_json import canonical_json

    identity = {k: v for k, v in record.items() if k not in ("run", "round", SIGNED)}
    if hashlib.sha256(canonical_json(identity)).hexdigest() != key:
        return f"record {digest[:12]} is not the identity its meeting {key[:12]} is keyed by"
    return readers.refusal(
        store, signing, digest, name=name, writer=None, what="the meeting's about record"
    )


def _empty_row(r: int | None, key: str | None, clients: int | None) -> dict[str, Any]:
    return {
        "round": r,
        "meeting": key,
        "clients": clients,
        "expected": None if clients is None else list(range(clients)),
        "quorum": None,
        "strategy": None,
        "written": [],
        "released": [],
        "dropped": [],
        "missing": [],
        "left_out": [],
        "refused": [],
        "averaging": None,
        "averagings": 0,
        "average": None,
        "averaged_by": None,
        "averages_by_inputs": {},
        "weights": None,
        "metrics": None,
        "privacy": None,
        "federated": None,
        "ignored": [],
        "problems": [],
        "cpu_s": None,
        "cost": None,
    }


def _status_row(
    store: Store,
    run: str,
    r: int,
    key: str,
    clients: int | None,
    signing: Signing | None,
    trusted: Collection[str],
) -> dict[str, Any]:

    prefix = layout.meeting(run, r, key)
    row = _empty_row(r, key, clients)
    row["_by"] = []  # the holder records of its processes, for `_costs`

    def attempt(what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except (SomaError, StoreError, OSError) as error:
            row["problems"].append(f"cannot read its {what}: {error}")

    def about() -> None:
        name = layout.about(prefix)
        digest = store.resolve(name)
        record = read_record(store, digest) if digest else {}
        refused = _about_refusal(store, signing, record, key, name, digest) if digest else None
        if refused is not None:  # nothing it says is used: not who was expected, not how many
            row["ignored"].append({"record": digest, "name": name, "why": refused})
            row["problems"].append(f"its about record is ignored: {refused}")
            record = {}
        count = record.get("clients", clients)
        if isinstance(count, int) and count > LISTED:
            row["problems"].append(
                f"its about record says {count} clients, more than soma status lists ({LISTED}): "
                "who was expected and who is missing are not listed"
            )
            row.update(clients=count, expected=None, quorum=record.get("quorum"))
            return
        expected = record.get("expected") or (None if count is None else list(range(count)))
        row.update(
            clients=count,
            expected=expected,
            quorum=record.get("quorum"),
            strategy=record.get("strategy"),
        )

    def written() -> None:
        # A drop-out's record is not a write: it says why that client brought nothing.
        found = {}
        for name in store.bound(layout.clients(prefix)):
            k = layout.client_of(name[len(prefix) + 1 :])
            if k is not None:
                found[k] = name
        dropped = {}
        for k, name in sorted(found.items()):
            try:
                record = records.read_client(store, store.resolve(name), client=k, name=name)
            except (SomaError, StoreError, OSError) as error:  # the others are still read
                row["problems"].append(f"cannot read client {k}'s record {name!r}: {error}")
                continue
            digest = store.resolve(name)
            why = readers.refusal(
                store, signing, digest, name=name, writer=k, what=f"client {k}'s record"
            )
            if why is not None:  # a record its client did not sign: not the client's
                row["ignored"].append({"record": digest, "name": name, "why": why})
                found.pop(k)
                continue
            row["_by"].append(getattr(record, "by", None))  # a secure one may have none
            if isinstance(record, records.DropRecord):
                dropped[k] = record.dropped
        row["written"] = sorted(k for k in found if k not in dropped)
        row["dropped"] = [{"client": k, "why": dropped[k]} for k in sorted(dropped)]

    def released() -> None:
        found, strays = _releases(store, prefix, row["clients"])
        row["released"] = sorted(found)
        row["problems"] += [f"{name!r} is no client's release name" for name in strays]
        for k, (name, count) in sorted(found.items()):
            client = layout.client(prefix, k, count)  # fanned out as its release
            kept = store.resolve(client)
            if kept is None or k not in row["written"]:  # not yet written, or not its own
                continue
            digest = store.resolve(name)
            if digest == kept:  # the release itself, as its client wrote it
                continue
            release = records.read_client(store, digest, client=k, name=name)
            record = records.read_client(store, kept, client=k, name=client)
            if getattr(release, "weights", None) != getattr(record, "weights", None):
                row["problems"].append(
                    f"client {k}'s record {kept[:12]} is not the release it claimed "
                    f"({digest[:12]}): a second noisy release of its update is in the store"
                )

    def averagings() -> None:
        under = layout.inputs(prefix)
        found = sorted({layout.under(n, under) for n in store.bound(under)})
        holder, computed = None, 0
        for a in found:
            place = Place(layout.averaging(prefix, a))
            computed += once.computations(store, place)
            latest = current_holder(store, place)
            pending = store.resolve(place.published) is None
            if latest is not None and (holder is None or pending):
                holder = {
                    "claim": latest[0],
                    **latest[1],
                    "gone": pending and holders.gone(latest[1]),
                }
        row.update(averaging=holder, averagings=computed)
        row["averages_by_inputs"] = {
            a: store.resolve(Place(layout.averaging(prefix, a)).published) for a in found
        }

    def average() -> None:
        name = layout.average(prefix)
        row["average"] = digest = store.resolve(name)
        why = digest and readers.average_refusal(store, signing, run, r, key, digest)
        if why:  # nothing a forged average says is shown: its weights, state, who came
            row["ignored"].append({"record": digest, "name": name, "why": why})
            row["average"] = None
        if row["average"]:
            record = records.read_average(store, row["average"])
            row.update(weights=record.weights, averaged_by=record.averaged_by)
            row["_by"].append(record.averaged_by)
            row["left_out"] = [x for x in record.left_out if not _refusal(x)]
            row["refused"] = [
                {**x, "why": str(x["why"])[len(records.refused("")) :]}
                for x in record.left_out
                if _refusal(x)
            ]

    def privacy() -> None:
        if row["average"]:
            record = records.read_average(store, row["average"]).value()
            row["privacy"] = privacy_spent(store, record, trusted=trusted)

    def metrics() -> None:
        digest = store.resolve(evaluation_name(run, row["weights"]))
        if digest is not None:
            record = read_record(store, digest)
            if record.get("weights") != row["weights"]:
                raise RoundError(f"record {digest} is the evaluation of other weights")
            row["metrics"] = record.get("metrics")

    attempt("meeting record (about)", about)
    attempt("client records", written)
    attempt("distributed-DP releases", released)
    attempt("averaging records", averagings)
    attempt("average record", average)
    if row["weights"]:  # the average record was read: what it says can be followed
        attempt("privacy spent (its strategy)", privacy)
        attempt("evaluation record", metrics)
        attempt(
            "federated evaluation",
            lambda: row.update(
                federated=_federated(store, prefix, row["weights"], signing, row["ignored"])
            ),
        )
    expected = row["expected"]
    came = {*row["written"], *(x["client"] for x in row["dropped"])}
    row["missing"] = [] if expected is None else [k for k in expected if k not in came]
    return row
