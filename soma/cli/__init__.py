"""The `soma` command line: the client script every Slurm task runs, a run's status, its model.

Each task is client `$SLURM_PROCID` unless `--mine` says otherwise.

    srun -n 4 soma client --store /shared/soma --run cifar --rounds 10 --clients 4
    soma simulate --rounds 10 --clients 4 [--store /tmp/s]   every client in this process
    soma status --store /shared/soma [--run cifar] [--wide | --json]   without --run: the runs
    soma export --store /shared/soma --run cifar [--round 9 | --best] -o cifar.safetensors
    soma verify --store /shared/soma [--run cifar]      exit 1 when anything is damaged
    soma repair --store /shared/soma [--run cifar] [--dry-run]
    soma audit --store /shared/soma --run cifar [--roster F] [--json] [--prov F]   read-only
    soma gc --store /shared/soma [--keep-runs cifar ... [--force]] [--dry-run] [--min-age 1h]
    soma keys --out keys --client 0-4 > roster-A.json   a site's key pairs, their roster
    soma keys merge roster-A.json roster-B.json > roster.json   the sites' rosters as one
    soma bucket serve --dir bucket     a local S3 server and bucket, to try sites on one machine

Starting imports no torch (seconds of CPU): `soma --help`, a command's help, `soma bucket
serve`, `soma keys`, and `soma status` of a store or of a run of rounds. soma.cli's modules
import at module level only what parsing needs; each command imports what it runs inside its
function, and soma.store its tensor modules on first use (soma/store/__init__.py).
tests/cli/test_torch_free.py checks it.
"""

from __future__ import annotations

import logging
import os
import sys

from soma.cli.parser import _mine_from_slurm, check_arguments, one_line, parser
from soma.errors import SomaError

__all__ = ["CLOSED_STDOUT", "QUIET_LOGGERS", "_mine_from_slurm", "main", "one_line", "parser"]

# The exit status of a command whose stdout was closed before it had said everything
# (`soma status | head -1`): 128 + SIGPIPE, as a C tool killed by the pipe exits, so that a
# pipeline under `set -o pipefail` can tell a cut-short listing from a whole one.
CLOSED_STDOUT = 141

# Libraries whose INFO lines say nothing a soma user acts on (boto's "Found credentials in
# environment variables." on every command on a bucket): their warnings still show.
QUIET_LOGGERS = ("botocore", "boto3", "s3transfer")


def main(argv: list[str] | None = None) -> int:
    """The `soma` command: a refusal is one `soma: ...` line on stderr (exit 1); a stdout
    closed by its reader ends the command quietly (exit `CLOSED_STDOUT`), never with a
    traceback."""
    try:
        try:
            return _command(argv)
        finally:
            sys.stdout.flush()  # a closed stdout says so here, not at the interpreter's exit
    except BrokenPipeError:
        _drop_stdout()
        return CLOSED_STDOUT


def _command(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    if getattr(args, "command", None) == "client" and args.mine is None:
        args.mine = _mine_from_slurm(args)
    if getattr(args, "command", None) == "simulate":
        args.mine = list(range(args.clients)) if args.clients > 0 else []
    try:
        check_arguments(args)
        return args.func(args)
    except SomaError as error:
        print(f"soma: {one_line(error)}", file=sys.stderr)
        return 1


def _drop_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for the closed pipe goes nowhere,
    so the interpreter's own flush at exit cannot fail again (Python's documented recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stdout that is no file: nothing to flush
        pass
