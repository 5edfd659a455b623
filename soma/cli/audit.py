"""`soma audit`: a run's rounds checked from its store alone (soma.audit), printed whole, then
exit 1 naming the first broken round."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from soma.cli.stores import existing_store


def audit(args: argparse.Namespace) -> int:
    """The full report (text, or --json), the PROV-JSON document to --prov and the RO-Crate
    to --crate (both written whatever the verdict, which they hold); then the first broken
    round as the command's one-line refusal (exit 1), or exit 0."""
    from soma.audit import audit as audit_run
    from soma.audit import crate, document, lines

    store = existing_store(args.store)
    started = _now()
    report = audit_run(
        store, args.run, args.roster, args.averagers, args.rounds, charter=args.charter
    )
    ended = _now()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(lines(report)))
    sys.stdout.flush()
    if args.prov is not None:
        with open(args.prov, "w") as out:
            json.dump(document(report, started, ended), out, indent=2, sort_keys=True)
            out.write("\n")
    if args.crate is not None:
        crate.write(args.crate, report, started, ended)
    failure = report.failure()
    if failure is not None:
        raise failure
    return 0


def _now() -> str:
    """The time now, ISO 8601 in UTC to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _rounds(text: str) -> int:
    """--rounds: a count of rounds, at least 1."""
    try:
        rounds = int(text)
    except ValueError:
        rounds = 0
    if rounds < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count of rounds (an integer >= 1)")
    return rounds


def add_command(commands: argparse._SubParsersAction) -> None:
    """`soma audit`'s options, registered on the command line's subcommands."""
    a = commands.add_parser(
        "audit",
        help="check a run round by round from its store alone (read-only): signatures, "
        "blobs, averages recomputed, the chain, the sample, the privacy ledger",
    )
    a.add_argument("--store", required=True)
    a.add_argument("--run", required=True)
    a.add_argument(
        "--roster",
        default=None,
        metavar="FILE",
        help="the run's roster (soma keys), the auditor's own (default: read back from the "
        "store, labelled not anchored)",
    )
    a.add_argument(
        "--rounds",
        type=_rounds,
        default=None,
        metavar="N",
        help="the rounds the run was configured for (its config's `rounds`, which it signs "
        "nowhere): rounds 0..N-1 must each be averaged, none beyond (default: how many the "
        "store holds is said, marked not checked)",
    )
    a.add_argument("--json", action="store_true", help="machine-readable output")
    a.add_argument(
        "--prov",
        default=None,
        metavar="FILE",
        help="write the run's provenance as W3C PROV-JSON, with the audit's verdict (clean or "
        "failed), each failed check and each one not made (by round, with why), the roster's "
        "and the charter's digests, who each round left out and why, and the model's digest; "
        "written whatever the verdict",
    )
    a.add_argument(
        "--crate",
        default=None,
        metavar="DIR",
        help="write an RO-Crate into DIR (ro-crate-metadata.json: RO-Crate 1.1, Workflow Run "
        "Crate 0.5; with audit.json and prov.json): the run as a CreateAction with the model as "
        "its result, marked FailedActionStatus when a check failed, and the audit with its "
        "verdict; written whatever the verdict",
    )
    a.set_defaults(func=audit)
