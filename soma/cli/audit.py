"""`soma audit`: a run's rounds checked from its store alone (soma.audit), printed whole, then
exit 1 naming the first broken round."""

from __future__ import annotations

import argparse
import json
import sys

from soma.cli.stores import existing_store


def audit(args: argparse.Namespace) -> int:
    """The full report (text, or --json), the PROV-JSON document to --prov; then the first
    broken round as the command's one-line refusal (exit 1), or exit 0."""
    from soma.audit import audit as audit_run
    from soma.audit import document, lines

    store = existing_store(args.store)
    report = audit_run(store, args.run, args.roster, args.averagers, args.rounds)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(lines(report)))
    sys.stdout.flush()
    if args.prov is not None:
        with open(args.prov, "w") as out:
            json.dump(document(report), out, indent=2, sort_keys=True)
            out.write("\n")
    failure = report.failure()
    if failure is not None:
        raise failure
    return 0


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
        "--prov", default=None, metavar="FILE", help="write the run's provenance as W3C PROV-JSON"
    )
    a.set_defaults(func=audit)
