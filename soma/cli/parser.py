"""The one option parser of the `soma` command, and the checks of its arguments that come
before any command does anything."""

from __future__ import annotations

import argparse
import os
from typing import Any

from soma.cli.asynchronous import add_arguments as add_asynchronous
from soma.cli.audit import add_command as add_audit
from soma.cli.bucket import add_command as add_bucket
from soma.cli.health import gc, keys, merge_rosters, repair, verify
from soma.cli.run import client
from soma.cli.show import export, status
from soma.cli.slurm import add_command as add_slurm
from soma.config.settings import add_run_options, clients_of
from soma.config.spec import BadArgument
from soma.store.errors import StoreError

DESCRIPTION = (
    "The `soma` command line: the client script every Slurm task runs, a run's status, its model."
)


def one_line(error: BaseException) -> str:
    """The error's message on one line: a refusal is one line of stderr, never a traceback."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


def check_arguments(args: argparse.Namespace) -> None:
    """Every argument of the command, checked before it runs: a refused command has made
    nothing (no store behind a mistyped path), read nothing and trained nothing."""
    if args.store is not None:
        _check_store(args.store)
    if getattr(args, "run", None) is not None:
        _check_run(args.run)
    if getattr(args, "clients", None) is not None:
        _at_least("--clients", args.clients, 1)
    if getattr(args, "round", None) is not None:
        _at_least("--round", args.round, 0)
    if args.command in ("client", "simulate"):
        _check_client(args)
    if getattr(args, "unchecked", False) and args.roster is not None:
        raise BadArgument("--unchecked and --roster: give one (--roster checks the signatures)")
    if args.command in ("status", "export") and args.averagers is not None and args.roster is None:
        raise BadArgument("--averagers without --roster: they are of the run's roster, give it")
    if getattr(args, "charter", None) is not None:
        _check_charter(args)


def _check_charter(args: argparse.Namespace) -> None:
    """--charter: a charter's full digest, of a signed run (a roster: its own, or for `soma
    audit` the one the store holds)."""
    from soma.config.spec import CHARTER_DIGEST

    if not CHARTER_DIGEST.fullmatch(args.charter):
        raise BadArgument(
            f"--charter {args.charter!r} is not a charter's digest (64 hex digits, as the run's "
            "first start printed it)"
        )
    if args.command != "audit" and args.roster is None:
        raise BadArgument("--charter without --roster: only a signed run has a charter, give it")


def _at_least(option: str, value: int, least: int) -> None:
    if value < least:
        raise BadArgument(f"{option} must be an integer >= {least}, not {value}")


def _check_store(path: str) -> None:
    from soma.store import check_folder

    try:
        check_folder(path)
    except StoreError as error:
        raise BadArgument(f"--store {path}: {error}") from None


def _check_run(run: str) -> None:
    from soma.store.names import check_run_name

    try:
        check_run_name(run)
    except StoreError as error:
        raise BadArgument(f"--run {run!r} is not a run's name: {error}") from None


def _check_client(args: argparse.Namespace) -> None:
    """The run's pure check (soma.config.spec: numbers, timing, sampling, secure aggregation,
    tree, the task's option names); the task and the strategy are made and checked together
    by `client`, before it writes anything."""
    from soma.config.spec import RunSpec

    RunSpec.from_args(args).check()


def _duration(text: str) -> float:
    """Seconds from `90`, `90s`, `30m`, `6h` or `2d`."""
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(text[-1:], None)
    try:
        return float(text[:-1] if scale else text) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (90, 90s, 30m, 6h or 2d)"
        ) from None


class _Defaults(argparse.HelpFormatter):
    """`--help` shows every option's default: the value itself, unless the help already
    says it (`default: ...`) or the option has none (a flag off, an empty list, None). A
    positional (a subcommand in `soma --help`) has no default to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if not action.option_strings:
            return text
        if "default" in text or action.required or default is argparse.SUPPRESS:
            return text
        if isinstance(default, bool) or default is None or default == []:
            return text + " (default: none)" if action.nargs != 0 else text
        return text + " (default: %(default)s)"


def _run_arguments(c: argparse.ArgumentParser) -> None:
    """What a run is and how a process drives it: `soma client`'s and `soma simulate`'s, built
    from the run settings' one declaration (soma.config.settings), and how it reports."""
    add_run_options(c)
    c.add_argument(
        "--evaluate",
        choices=("one", "all", "none"),
        default="one",
        help="who logs the test metrics of each round's new weights on stderr: one client "
        "(the lowest-numbered of the round), every client, or nobody",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="soma", description=DESCRIPTION, formatter_class=_Defaults)
    commands = top.add_subparsers(dest="command", required=True)
    commands_add = commands.add_parser

    def add_parser(*args: Any, **kwargs: Any) -> argparse.ArgumentParser:
        return commands_add(*args, formatter_class=_Defaults, **kwargs)

    commands.add_parser = add_parser  # type: ignore[method-assign]
    c = commands.add_parser("client", help="train one client's shard for every round")
    c.add_argument("--store", required=True, help="the shared folder every task can see")
    c.add_argument("--run", required=True, help="the run's name (two runs may share a store)")
    c.add_argument("--rounds", type=int, required=True)
    c.add_argument("--clients", type=int, required=True)
    c.add_argument(
        "--mine",
        type=clients_of,
        default=None,
        help="the clients this process trains: 3, 0-4 or 0,2,5-7 (default: $SLURM_PROCID, "
        "or with --per-task B, task p's B clients p*B..p*B+B-1)",
    )
    c.add_argument(
        "--per-task",
        type=int,
        default=1,
        metavar="B",
        help="clients per task when --mine is not given (default 1)",
    )
    _run_arguments(c)
    add_asynchronous(c, simulated=False)
    c.set_defaults(func=client)
    m = commands.add_parser(
        "simulate", help="every client of a run in this one process (the bits of soma client)"
    )
    m.add_argument(
        "--store",
        default=None,
        help="the store to keep the run in (default: a temporary folder, removed at the end)",
    )
    m.add_argument("--run", default="simulation", help="the run's name")
    m.add_argument("--rounds", type=int, required=True)
    m.add_argument("--clients", type=int, required=True)
    _run_arguments(m)
    add_asynchronous(m, simulated=True)
    m.set_defaults(func=client)
    s = commands.add_parser(
        "status",
        help="per round: who wrote, who is missing, the average; without --run, the store's runs",
    )
    s.add_argument("--store", required=True)
    s.add_argument(
        "--run", default=None, help="the run (default: list the store's runs, one line each)"
    )
    s.add_argument(
        "--clients", type=int, default=None, help="the client count, where a round does not say"
    )
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument(
        "--wide",
        action="store_true",
        help="every detail on a round's line (where its average was computed, the spread of "
        "its federated evaluation, its average record); default: lines of 100 columns",
    )
    _reader_roster(s)
    s.set_defaults(func=status)
    e = commands.add_parser(
        "export", help="one round's average as a safetensors file plain PyTorch loads"
    )
    e.add_argument("--store", required=True)
    e.add_argument("--run", required=True)
    e.add_argument(
        "--round", type=int, default=None, help="the round (default: the last one averaged)"
    )
    e.add_argument(
        "--average",
        default=None,
        metavar="DIGEST",
        help="which average, when the round has several (a unique prefix will do)",
    )
    e.add_argument(
        "--best",
        action="store_true",
        help="the round whose federated validation --metric (the clients' own held-out "
        "data, never the central test set) is best",
    )
    e.add_argument(
        "--metric", default="accuracy", help="with --best: the metric (a loss: lower is better)"
    )
    e.add_argument("-o", "--output", required=True, help="the model file to write")
    _reader_roster(e)
    e.add_argument(
        "--unchecked",
        action="store_true",
        help="export a run that has a roster without checking its signatures (refused "
        "otherwise unless --roster is given)",
    )
    e.set_defaults(func=export)
    v = commands.add_parser(
        "verify", help="hash every blob, check every name and reference; exit 1 on damage"
    )
    v.add_argument("--store", required=True)
    v.add_argument("--run", default=None, help="only what this run's names reach")
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.set_defaults(func=verify)
    r = commands.add_parser(
        "repair", help="rebuild damaged averages from their inputs; say what reruns the rest"
    )
    r.add_argument("--store", required=True)
    r.add_argument("--run", default=None, help="only what this run's names reach")
    r.add_argument("--dry-run", action="store_true", help="say what would be done; do nothing")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.set_defaults(func=repair)
    k = commands.add_parser(
        "keys",
        help="make clients' Ed25519 key pairs for signed records and print their roster "
        "(--out, --client); or merge the sites' rosters into one (keys merge)",
        usage="soma keys --out FOLDER --client CLIENTS > roster-A.json\n"
        "       soma keys merge ROSTER [ROSTER ...] [-o FILE]",
    )
    k.add_argument("--out", default=None, help="the folder to write <k>.key and <k>.pub in")
    k.add_argument("--client", type=clients_of, default=None, help="the clients: 3, 0-4 or 0,2,5-7")
    k.set_defaults(func=keys, store=None)
    merging = k.add_subparsers(
        dest="keys_action", title="merging the sites' rosters", metavar="merge"
    )
    km = merging.add_parser(
        "merge",
        help="the sites' rosters (soma keys' output) as one, printed: refused when a client "
        "has two keys or a key two clients, naming them and both files",
    )
    km.add_argument("rosters", nargs="+", metavar="ROSTER", help="a roster file (JSON or YAML)")
    km.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="write it here (default: stdout)"
    )
    km.set_defaults(func=merge_rosters)
    g = commands.add_parser(
        "gc", help="remove unreachable blobs and temporaries of writers that are gone"
    )
    g.add_argument("--store", required=True)
    g.add_argument(
        "--keep-runs",
        nargs="+",
        default=None,
        metavar="RUN",
        help="remove the names of every run but these first (default: keep every name)",
    )
    g.add_argument(
        "--force",
        action="store_true",
        help="with --keep-runs: drop a run even with an open round (no average published yet)",
    )
    g.add_argument(
        "--dry-run", action="store_true", help="say what would be removed; remove nothing"
    )
    g.add_argument(
        "--min-age",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="remove only what was untouched this long, at least 2m: 90s, 30m, 6h, 2d "
        "(default 1h, soma.health.GRACE)",
    )
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.set_defaults(func=gc)
    add_audit(commands)
    _reader_averagers(commands.choices["audit"])
    _reader_charter(commands.choices["audit"])
    add_bucket(commands)
    add_slurm(commands)
    return top


def _reader_roster(command: argparse.ArgumentParser) -> None:
    """A reading command's --roster: the run's records are taken only when signed."""
    command.add_argument(
        "--roster",
        default=None,
        metavar="FILE",
        help="the run's roster (soma keys): only records a roster member signed are taken; "
        "the others are named and ignored",
    )
    _reader_averagers(command)
    _reader_charter(command)


def _reader_charter(command: argparse.ArgumentParser) -> None:
    """A reading command's --charter: the run's charter pinned (soma.round.signing.pinned)."""
    command.add_argument(
        "--charter",
        default=None,
        metavar="DIGEST",
        help="the digest of the run's charter, as its first start printed it: a store that "
        "holds another (or none) is refused (default: the store's, taken on first use)",
    )


def _reader_averagers(command: argparse.ArgumentParser) -> None:
    """A reading command's --averagers: those the run declared (its roster's digest covers
    them), refused when not the run's charter's (soma.round.signing.for_reader)."""
    command.add_argument(
        "--averagers",
        type=clients_of,
        default=None,
        metavar="CLIENTS",
        help="the clients the run let sign an average (its `averagers`, --averagers: 0-2, or "
        "0,3), needed to read a run that declared them (default: any roster member)",
    )


def _mine_from_slurm(args: argparse.Namespace) -> list[int]:
    """Task p of an srun hosts client p, or with --per-task B clients p*B..p*B+B-1."""
    procid = os.environ.get("SLURM_PROCID")
    if procid is None:
        raise SystemExit("soma client: --mine not given and $SLURM_PROCID is not set")
    if not procid.isdigit():
        raise SystemExit(f"soma client: $SLURM_PROCID is {procid!r}, not a task number")
    if args.per_task < 1:
        raise SystemExit(f"soma client: --per-task {args.per_task} must be at least 1")
    first = int(procid) * args.per_task
    mine = list(range(first, min(first + args.per_task, args.clients)))
    if not mine:
        raise SystemExit(
            f"soma client: task {procid} with --per-task {args.per_task} hosts no client "
            f"of {args.clients}"
        )
    return mine
