"""`soma status` and `soma export`: a store's runs or a run's rounds as lines, and one round's
model as a file."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from soma.cli.stores import existing_store
from soma.config.spec import BadArgument
from soma.slurm import cost as slurm_cost


def _metrics_text(metrics: Any) -> str:
    if not isinstance(metrics, dict):
        return ""
    shown = [
        f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"
        for name, value in sorted(metrics.items())
    ]
    return "; " + ", ".join(shown) if shown else ""


def _federated_text(federated: Any, wide: bool) -> str:
    """`; validation accuracy 0.91 over 4 clients`: a round's federated evaluation
    (soma.run.evaluation), its means; wide, each with its spread `[min 0.80, p10 0.82, median
    0.93, max 1.00]`, and the training loss."""
    if not isinstance(federated, dict):
        return ""
    parts = []
    for name, spread in sorted((federated.get("evaluation") or {}).items()):
        stats = ", ".join(
            f"{stat} {_g(spread.get(stat))}" for stat in ("min", "p10", "median", "max")
        )
        parts.append(
            f"validation {name} {_g(spread.get('mean'))}" + (f" [{stats}]" if wide else "")
        )
    said = "; " + ", ".join(parts) + f" over {len(federated.get('evaluated') or [])} clients"
    loss = (federated.get("training") or {}).get("loss")
    return said + (f"; train loss {_g(loss.get('mean'))}" if loss and wide else "")


def _g(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "nan"


def status(args: argparse.Namespace) -> int:
    """Per round: who wrote, who is missing, who was left out, whose input was refused, the
    average's weights and its metrics, a line of 100 columns for a round that went as it
    should (--wide: every detail); without --run, the store's runs, one line each.

    Exits 1 when a round could not be read (it is said on that round's line, and every
    other round is still shown; a name where a round's folder belongs, a planted link, is a
    line of its own) or, with --roster, holds a record whose signature does not hold (said,
    and nothing it says shown); refuses a store or a run that is not there. A run that has a
    roster, shown without --roster, says on every line that its signatures were not checked.
    Reads records, never a tensor, and imports no torch for a run of rounds, a DP run or an
    asynchronous run (tests/cli/test_torch_free.py, test_status_torch_free.py).
    """
    from soma.asynchronous.status import is_asynchronous
    from soma.round import check_run
    from soma.round import status as round_status
    from soma.round.signing import for_reader, pinned

    if args.run is None:
        return _runs_status(args)
    store = existing_store(args.store)
    pinned(store, args.run, None, args.charter)  # a store with another charter: refused now
    if is_asynchronous(store, args.run):  # versions, not rounds (soma.asynchronous)
        return _versions_status(store, args)
    check_run(store, args.run)
    signing = (
        None if args.roster is None else for_reader(store, args.run, args.roster, args.averagers)
    )
    signing = pinned(store, args.run, signing, args.charter)
    table = round_status(store, args.run, clients=args.clients, signing=signing)
    unreadable = any(row["problems"] or row.get("ignored") for row in table)
    if args.json:
        print(json.dumps(table, indent=2, sort_keys=True))
        return 1 if unreadable else 0
    if not table:
        print(f"run {args.run!r}: no rounds yet in {args.store}")
        return 0
    meetings = [row for row in table if row["meeting"] is not None]
    several = {r["round"] for r in meetings if sum(x["round"] == r["round"] for x in meetings) > 1}
    for row in table:
        print(_status_line(row, several, wide=args.wide))
    return 1 if unreadable else 0


def _runs_status(args: argparse.Namespace) -> int:
    """`soma status --store S`: one line a run (rounds or versions done, the last one's
    weights digest), read as the store says; exit 1 when a run's last record cannot be read.
    A run's own flags (--roster, --charter, --clients) are refused: they are of one run."""
    from soma.asynchronous import status as versions
    from soma.round import report

    given = [f for f in ("roster", "charter", "clients") if getattr(args, f) is not None]
    if given:
        raise BadArgument(f"--{given[0]} is of one run: give --run too (or leave it out to list)")
    store = existing_store(args.store)
    rows = [report.summary(store, run) for run in report.runs(store)]
    rows += [versions.summary(store, run) for run in versions.runs(store)]
    rows.sort(key=lambda row: row["run"])
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    elif not rows:
        print(f"no runs in the store at {args.store}")
    else:
        width = max(len(row["run"]) for row in rows)
        print("\n".join(_run_line(row, width, args.wide) for row in rows))
    return 1 if any(row["problem"] for row in rows) else 0


def _run_line(row: dict[str, Any], width: int, wide: bool) -> str:
    """`digits  rounds     10 of 10 averaged; last round 9 at 2026-12-06 11:02 UTC, weights
    3f2a9c01b7e4` (one line; wide, the whole digest)."""
    if row["kind"] == "rounds":
        done = f"{row['averaged']:>4} of {row['rounds']} averaged"
        last = "" if row["last"] is None else f"; last round {row['last']}"
    else:
        done = f"{row['versions']:>4} published"
        last = "" if row["last"] is None else f"; last version {row['last']}"
    if row["when"]:  # ISO 8601 in UTC, to the minute: `2026-12-06 11:02`
        last += f" at {row['when'][:16].replace('T', ' ')} UTC"
    weights = f", weights {row['weights'][: None if wide else DIGEST]}" if row["weights"] else ""
    problem = f"; {row['problem']}" if row["problem"] else ""
    if row.get("signed"):  # read as the store says: its signatures are checked with --run
        problem += "; signed: check it with --run and --roster"
    return f"{row['run']:<{width}}  {row['kind']:<8} {done}{last}{weights}{problem}"


def _versions_status(store: Any, args: argparse.Namespace) -> int:
    """An asynchronous run's versions, their consumed updates and staleness; exit 1 when one
    does not replay from its record."""
    from soma.asynchronous import status as versions

    rows = versions.table(store, args.run, args.roster, args.averagers)
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        print("\n".join(versions.lines(rows, wide=args.wide)))
    return 1 if any(row.get("problems") for row in rows) else 0


# How much of a weights digest a short line shows: enough to tell runs' weights apart by eye
# (48 bits); --wide and --json show it whole or to 16.
DIGEST = 12
# The most clients a short line names (missing); past it, their count.
NAMED = 5
WIDTH = 100  # the columns of a short line: what it adds only if there is room keeps to it


def _status_line(row: dict[str, Any], several: set[int], *, wide: bool = False) -> str:
    """A round's line. The short one (the default) keeps what a reader acts on: who wrote, is
    missing, dropped out, was refused or left out and why, the average's weights digest (the
    one every mode prints for the same weights), the round's metrics (the means of its
    federated evaluation), the privacy spent, and every problem whole (a refusal names its
    culprit and its fix: cut, it would not); and its Slurm jobs' core-hours where the line
    has room. --wide adds where the average's arithmetic ran, its record's digest, the
    spread of the federated evaluation and the training loss, and what the round cost: its
    processes' CPU seconds and its Slurm jobs' hours, queue wait and energy."""
    if row["meeting"] is None:  # a name where a round's or a meeting's folder belongs
        where = "?" if row["round"] is None else row["round"]
        return f"round {where:>4}: " + "; ".join(row["problems"])
    if row["expected"] is None:
        written = f"{len(row['written'])}/? written (the round does not say its clients: --clients)"
    else:
        written = f"{len(row['written'])}/{len(row['expected'])} written"
    released = row.get("released") or []  # distributed DP's releases (soma.round.client)
    came = {*row["written"], *(x["client"] for x in row.get("dropped") or [])}
    pending = [k for k in released if k not in came]
    if wide and released:
        written += f" ({len(released)} released)"
    if pending:  # its noise is drawn and claimed; its weights and record still on their way
        written += f", {len(pending)} released, not yet written"
    if row.get("dropped"):
        written += f", {len(row['dropped'])} dropped out"
    if row.get("refused"):
        written += f", {len(row['refused'])} refused"
    missing = row["missing"]
    if missing and not wide and len(missing) > NAMED:
        written += f", {len(missing)} missing (--wide names them)"
    elif missing:
        written += f", missing {missing}"
    holder = row["averaging"]
    if row["average"]:
        state = _average_text(row, wide)
    elif holder:
        from soma.round import holders  # imported by status() already (soma.round)

        state = f"averaging held by {holders.describe(holder)}"
        state += " (gone)" if holder["gone"] else ""
    else:
        state = "not averaged"
    apart = row.get("apart") or f"{row['meeting'][:8]}, {row['strategy']}"
    meeting = f" [{apart}]" if row["round"] in several else ""
    left = "".join(f"; left out client {x['client']}: {x['why']}" for x in row["left_out"])
    left += "".join(f"; refused client {x['client']}: {x['why']}" for x in row.get("refused", []))
    problems = "".join(f"; {problem}" for problem in row["problems"])
    problems += "".join(f"; unsigned/forged, ignored: {x['why']}" for x in row.get("ignored") or [])
    from soma.strategies import is_builtin

    if row["strategy"] and not is_builtin(row["strategy"]):  # its privacy spent not shown
        problems += f"; strategy {row['strategy']} (named by the store: not built in, not imported)"
    if row.get("signatures") == "not checked":
        problems += "; signatures not checked: pass --roster"
    metrics = _metrics_text(row["metrics"]) + _privacy_text(row.get("privacy"))
    metrics += _federated_text(row.get("federated"), wide)
    head, tail = f"round {row['round']:>4}{meeting}: {written}; {state}{metrics}", left + problems
    if wide:
        return head + _cost_text(row) + tail
    spent = row.get("cost")
    hours = f"; {spent['cpu_hours']:.2f} core-hours" if isinstance(spent, dict) else ""
    return head + (hours if len(head + hours + tail) <= WIDTH else "") + tail


def _cost_text(row: dict[str, Any]) -> str:
    """`; CPU 12.3 s; Slurm: 0.4 core-hours (0.1 used), 0 GPU-hours, ...`: what the round
    cost (soma.round.report: its processes' CPU seconds; its Slurm jobs, soma.slurm.cost)."""
    said = "" if row.get("cpu_s") is None else f"; CPU {row['cpu_s']:.1f} s"
    spent = row.get("cost")
    if isinstance(spent, dict):
        fields = {f.name for f in dataclasses.fields(slurm_cost.Total)}
        summed = slurm_cost.Total(**{k: v for k, v in spent.items() if k in fields})
        jobs = f"{summed.jobs} job{'s' if summed.jobs != 1 else ''}"
        said += f"; Slurm ({jobs}): {slurm_cost.said(summed)}"
    return said


def _average_text(row: dict[str, Any], wide: bool) -> str:
    """`average weights 3f2a9c01b7e4 by site B`; --wide: the average record's digest first, and
    where its arithmetic ran."""
    weights = row.get("weights") or "?"
    if wide:
        state = f"average {row['average'][:16]} (weights {weights[:16]})"
    else:
        state = f"average weights {weights[:DIGEST]}"
    by = row.get("averaged_by")
    if isinstance(by, dict) and by.get("site") is not None:  # a run across sites
        state += f" by site {by['site']}"
    if wide and isinstance(by, dict) and by.get("cpu"):  # where it ran (soma.arithmetic)
        state += f" (computed under torch {by.get('torch')}, {by['cpu']})"
    if len(row["averages_by_inputs"]) > 1:
        state += f" ({len(row['averages_by_inputs'])} averages: the round was rerun)"
    return state


def _privacy_text(spent: Any) -> str:
    """The privacy a DP strategy has spent up to the round: each figure, against whom."""
    if not isinstance(spent, dict):
        return ""
    from soma.privacy import spent_text

    return f"; privacy spent: {spent_text(spent)}"


def export(args: argparse.Namespace) -> int:
    """One average's weights as a safetensors file plain PyTorch loads (see soma.model); with
    --roster only a signed one (soma.exported), and a run that has a roster is refused
    without it, unless --unchecked."""
    from soma.asynchronous.status import is_asynchronous
    from soma.exported import export_checked, reader_signing
    from soma.round.signing import pinned

    if args.best:
        return _export_best(args)
    store = existing_store(args.store)
    pinned(store, args.run, None, args.charter)  # a store with another charter: refused now
    if is_asynchronous(store, args.run):  # a version (--round), not a round's average
        return _export_version(store, args)
    signing = reader_signing(
        store, args.run, args.roster, unchecked=args.unchecked, averagers=args.averagers
    )
    signing = pinned(store, args.run, signing, args.charter)
    made = export_checked(
        store, args.run, args.output, signing=signing, round=args.round, average=args.average
    )
    print(
        f"{args.output}: round {made['round']} of run {made['run']!r}, "
        f"weights {made['weights']}, average {made['average']}"
    )
    return 0


def _export_version(store: Any, args: argparse.Namespace) -> int:
    """`soma export` of an asynchronous run: version --round (default the latest)."""
    from soma.asynchronous.exported import export_version

    if args.average is not None:
        raise BadArgument(
            f"run {args.run!r} is asynchronous: choose its version with --round (the latest by "
            "default), not --average"
        )
    made = export_version(
        store, args.run, args.output, version=args.round, roster=args.roster,
        averagers=args.averagers,
    )  # fmt: skip
    print(
        f"{args.output}: version {made['version']} of run {made['run']!r}, "
        f"weights {made['weights']}, record {made['record']}"
    )
    return 0


def _export_best(args: argparse.Namespace) -> int:
    """`soma export --best`: the round whose federated validation `--metric` is best; with
    --roster among signed records only, each one left out named on stderr."""
    from soma.exported import export_best_checked, reader_signing
    from soma.round.signing import pinned

    if args.round is not None or args.average is not None:
        raise BadArgument("--best chooses the round itself: give it without --round or --average")
    store = existing_store(args.store)
    pinned(store, args.run, None, args.charter)  # a store with another charter: refused now
    signing = reader_signing(
        store, args.run, args.roster, unchecked=args.unchecked, averagers=args.averagers
    )
    signing = pinned(store, args.run, signing, args.charter)
    made = export_best_checked(store, args.run, args.output, args.metric, signing=signing)
    for why in made["ignored"]:
        print(f"soma: ignored (unsigned/forged): {why}", file=sys.stderr)
    print(
        f"{args.output}: round {made['round']} of run {made['run']!r} (best federated "
        f"validation {args.metric} {made['best']['validation']:.4g}), weights {made['weights']}"
    )
    return 0


# --- the arguments, all checked before anything is read, made or trained -----------------
