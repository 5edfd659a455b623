"""`soma verify`, `soma repair`, `soma gc` (soma.health's reports, printed), `soma keys` and
`soma keys merge`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from soma.cli.stores import existing_store


def _progress_bar(label: str):
    """A progress line on stderr when it is a terminal (else None): bytes, percent, speed;
    redrawn at most ten times a second, and ended by `done()`."""
    if not sys.stderr.isatty():
        return None

    started = time.monotonic()
    shown = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if now - shown[0] < 0.1 and done < total:
            return
        shown[0] = now
        rate = done / max(now - started, 1e-9) / 1e6
        percent = 100.0 * done / total if total else 100.0
        print(
            f"\r{label}: {done / 1e9:.2f}/{total / 1e9:.2f} GB {percent:5.1f}% {rate:7.0f} MB/s",
            end="",
            file=sys.stderr,
            flush=True,
        )

    show.done = lambda: print("", file=sys.stderr)  # type: ignore[attr-defined]
    return show


def _print_report(report: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        for line in report.lines():
            print(line)


def verify(args: argparse.Namespace) -> int:
    """Every blob hashed against its name, every name and reference present: exit 1 when
    anything is damaged, each problem said with its path and what fixes it."""
    from soma.health import verify as verify_store

    store = existing_store(args.store)
    bar = _progress_bar("verify")
    try:
        report = verify_store(store, args.run, progress=bar)
    finally:
        if bar is not None:
            bar.done()
    _print_report(report, args.json)
    return 0 if report.clean else 1


def repair(args: argparse.Namespace) -> int:
    """Rebuild what can be recomputed (averages, from their inputs); exit 1 when damage is
    left, each said with the job whose rerun fixes it."""
    from soma.health import repair as repair_store

    store = existing_store(args.store)
    bar = _progress_bar("verify")
    try:
        report = repair_store(store, args.run, dry_run=args.dry_run, progress=bar)
    finally:
        if bar is not None:
            bar.done()
    _print_report(report, args.json)
    return 0 if report.clean else 1


def gc(args: argparse.Namespace) -> int:
    """Remove unreachable blobs older than --min-age and temporaries of writers that are
    gone; with --keep-runs, every other run's names first. Exit 1 when damage kept it from
    removing blobs (it says which, and that `soma repair` comes first). What it refuses (a
    --min-age below its floor, a symbolic link in the store, a run still going) is the
    library's refusal (soma.health.gc), said in one line."""
    from soma.health import GRACE
    from soma.health import gc as collect

    store = existing_store(args.store)
    report = collect(
        store,
        keep_runs=args.keep_runs,
        dry_run=args.dry_run,
        min_age=GRACE if args.min_age is None else args.min_age,
        force=args.force,
    )
    _print_report(report, args.json)
    return 1 if report.blocked else 0


def keys(args: argparse.Namespace) -> int:
    """A fresh Ed25519 key pair for each client (soma.round.signing): `<out>/<k>.key` (mode
    0600: keep it where only that client's jobs read it) and `<out>/<k>.pub`; prints the
    roster of their public keys, one JSON object, for the run's `roster` file."""
    from soma.config.spec import BadArgument
    from soma.round.signing import SigningError, make_keys

    if args.out is None or args.client is None:
        raise BadArgument(
            "soma keys makes key pairs with --out FOLDER --client CLIENTS; "
            "`soma keys merge ROSTER ...` merges the sites' rosters"
        )
    taken = [str(Path(args.out) / f"{k}.key") for k in args.client]
    taken = [path for path in taken if os.path.lexists(path)]
    if taken:  # refused before any key is made
        raise SigningError(f"{', '.join(taken)} exist: a client's key is made once")
    roster = {}
    for k in args.client:
        path, public = make_keys(args.out, k)
        roster[str(k)] = public
        print(f"client {k}: private key {path}", file=sys.stderr)
    print(json.dumps(roster, indent=1), flush=True)
    return 0


def merge_rosters(args: argparse.Namespace) -> int:
    """`soma keys merge`: the sites' rosters as one (soma.round.signing.merge_rosters),
    printed as `soma keys` prints one, or written whole to --output; nothing is written when
    a roster is refused."""
    from soma.config.spec import BadArgument
    from soma.files import write_atomic
    from soma.round.signing import merge_rosters as merged

    if args.out is not None or args.client is not None:
        raise BadArgument("soma keys merge takes rosters, not --out or --client (which make keys)")
    text = json.dumps({str(k): key for k, key in merged(args.rosters).items()}, indent=1)
    if args.output is None:
        print(text, flush=True)
    else:
        try:
            write_atomic(args.output, f"{text}\n".encode())
        except OSError as error:
            raise BadArgument(f"--output {args.output}: {error.strerror or error}") from None
    return 0
