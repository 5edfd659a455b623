"""Every run setting, declared once: its field of the run's description (soma.config.spec's
`RunSpec`), its config key, its `soma client`/`soma simulate` option with that option's
parsing and help, its `soma.simulate` keyword, and whether it changes what the run is.

A refusal names a setting the way the user gave it (`RunSpec.named`: the config key, the
option or the keyword), the command line's run options are built from here
(`soma.cli.parser`), and tests/config/test_settings.py holds the rest to it: each setting
has its block in the config schema, its row in config/README.md, its keyword in
`soma.simulate`, is set by both of RunSpec's constructors, and, where it changes the run,
is in the run's declared identity (soma.config.identity). Adding a setting is one entry
here, and that test says what else it needs. Pure Python, no torch: the Snakefile uses it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from soma.files import DURABLE
from soma.timing import DEADLINE, LEASE
from soma.transfer import FULL, PRECISIONS


def count_or_fraction(text: str) -> int | float:
    """`4` is a count, `0.5` a fraction (checked against the client count by soma)."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither a count nor a fraction"
            ) from None


def clients_of(text: str) -> list[int]:
    """`3`, `0-4`, `0,2,5` or `0-4,8`: the clients one process hosts (soma.config.options)."""
    from soma.config.options import clients_of as parsed

    try:
        return parsed(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def threads_default() -> int:
    """`--threads` without a value: $SOMA_THREADS (soma-srun.sbatch sets it), else 1."""
    return int(os.environ.get("SOMA_THREADS", "1"))


@dataclass(frozen=True)
class Setting:
    """One run setting, a field of `RunSpec` or of its `Timing` (`of`). `config`, `option`,
    `keyword`: how the workflow's config, the command line and `soma.simulate` name it (None:
    not given that way). `changes_run`: part of what the run is (its declared identity: another
    value is another run). `flag`: the argparse
    keywords of its option, where the run options of `soma client` and `soma simulate` build
    it (empty: each command declares its own, as `--store` and `--rounds`; a callable default
    is called when the parser is built)."""

    field: str
    config: str | None
    option: str | None
    keyword: str | None
    changes_run: bool
    of: str = "run"
    flag: Mapping[str, Any] = field(default_factory=dict)


def _setting(
    name: str,
    *,
    config: str | None = "",
    option: str | None = "",
    keyword: str | None = "",
    changes_run: bool = False,
    of: str = "run",
    **flag: Any,
) -> Setting:
    """A setting whose config key and keyword are its field's name, its option `--field`,
    unless told otherwise (None: not given that way)."""
    return Setting(
        field=name,
        config=name if config == "" else config,
        option="--" + name.replace("_", "-") if option == "" else option,
        keyword=name if keyword == "" else keyword,
        changes_run=changes_run,
        of=of,
        flag=flag,
    )


SETTINGS: tuple[Setting, ...] = (
    _setting("run"),
    _setting("clients", changes_run=True),
    _setting("rounds"),
    _setting(
        "task",
        changes_run=True,
        default="soma.tasks.control",
        help="a task's import path (default: soma.tasks.control, a toy task that serves "
        "any client count in seconds: a fixed teacher network, each client on one corner of "
        "its inputs; the workflow's default, and the README's results, are --task "
        "soma.tasks.digits)",
    ),
    _setting(
        "task_options",
        option="--option",
        changes_run=True,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a task option (repeatable)",
    ),
    _setting(
        "strategy",
        changes_run=True,
        default="fedavg",
        help="how a round's updates become the next weights: a built-in name or an import path",
    ),
    _setting(
        "strategy_options",
        option="--strategy-option",
        changes_run=True,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a strategy option (repeatable)",
    ),
    _setting(
        "seed",
        changes_run=True,
        type=int,
        default=0,
        help="the seed of the starting weights",
    ),
    _setting(
        "participation",
        changes_run=True,
        type=count_or_fraction,
        default=None,
        help="clients per round: a count (4) or a fraction (0.5), drawn from the seed and the "
        "round (default: everyone)",
    ),
    _setting(
        "quorum",
        changes_run=True,
        type=count_or_fraction,
        default=None,
        help="how many of a round's clients must come for it to be averaged without the rest "
        "once --deadline has passed: a count or a fraction (default: all of them)",
    ),
    _setting(
        "drop_unstarted",
        config=None,
        changes_run=True,
        action="store_true",
        help="past --deadline, a quorum round goes on without the clients whose Slurm jobs "
        "have not started or have ended (cancelled, failed), its record saying where each "
        "job was (squeue; clients as jobs of this job's name: an array, or --comment "
        "client=K); without Slurm it changes nothing (default: off)",
    ),
    _setting(
        "secure",
        config="secure_aggregation",
        option="--secure-aggregation",
        keyword="secure_aggregation",
        changes_run=True,
        type=int,
        default=None,
        metavar="T",
        help="secure aggregation (soma.secagg): nobody, the averager included, reads a "
        "client's weights, only their sum; T of the round's clients must come to unmask it "
        "(FedAvg-style strategies; needs the `privacy` extra; default: off)",
    ),
    _setting("secrets", config="secure_aggregation.secrets", option=None, keyword=None),
    _setting(
        "tree",
        changes_run=True,
        type=int,
        default=None,
        metavar="FAN_IN",
        help="average through a tree of partial means, FAN_IN inputs a node, the work "
        "shared by every process of the round (FedAvg-style strategies; default: flat)",
    ),
    _setting("per_job", config="clients_per_job", option="--per-task", keyword=None),
    _setting("mine", config=None, keyword=None),
    _setting(
        "threads",
        changes_run=True,
        type=int,
        default=threads_default,
        help="torch threads its clients train on: part of the run, since the count decides a "
        "CPU's sums (default: $SOMA_THREADS, else 1: safe when jobs share cores)",
    ),
    _setting(
        "durability",
        default=DURABLE,
        help="durable: a name is durable before it is said bound, never before what it "
        "reaches; scratch: no fsync (a machine crash means rerunning the round), refused on "
        "a store that says it is shared (its file `shared`); `soma simulate`'s temporary store "
        "(no --store) is scratch whatever this says: nothing of it outlives the process",
    ),
    _setting(
        "personal",
        changes_run=True,
        action="append",
        default=[],
        metavar="NODE",
        help="a node each client keeps for itself: never sent nor averaged, kept as its own "
        "state (FedPer, FedBN; repeatable)",
    ),
    _setting(
        "roster",
        default=None,
        metavar="FILE",
        help="signed records: a JSON or YAML file of client -> Ed25519 public key (soma keys); "
        "every record is signed by its writer and checked before use (default: unsigned)",
    ),
    _setting(
        "keys",
        default=None,
        metavar="PATH",
        help="with --roster, this process's clients' private keys: a path, {client} standing "
        "for the client (e.g. keys/{client}.key)",
    ),
    _setting(
        "averagers",
        type=clients_of,
        default=None,
        metavar="CLIENTS",
        help="with --roster, the clients whose keys may sign an average (0-2, or 0,3; "
        "default: any roster member)",
    ),
    _setting(
        "charter",
        default=None,
        metavar="DIGEST",
        help="with --roster, the digest of the run's charter, as its first start printed it: "
        "any other charter in the store is refused, and none is claimed (default: the "
        "store's, taken on first use)",
    ),
    _setting(
        "verify_averages",
        choices=("recompute", "signature"),
        default=None,
        help="how an average another process published is checked before it is trained "
        "from: recomputed bit for bit from its signed inputs, or its signature only "
        "(default: recompute with --roster, else signature)",
    ),
    _setting(
        "evaluate_participation",
        type=count_or_fraction,
        default=None,
        help="who evaluates each round's average on their own held-out data (a task's "
        "evaluate_local): a count or a fraction of the clients, drawn from the seed and the "
        "round (default: the round's sample; under soma simulate, 100 clients when the sample "
        "is larger)",
    ),
    _setting(
        "tracking",
        default=None,
        metavar="DIR",
        help="write per-round metrics as TensorBoard event files in DIR (the `tracking` "
        "extra; default: none)",
    ),
    _setting("site", option=None, keyword=None),
    _setting("sites", option=None, keyword=None),
    # buffered asynchronous rounds: `soma client`/`soma simulate` (soma.cli.asynchronous
    # declares --buffer and its companions); the workflow's rounds are synchronous
    _setting("asynchronous", config=None, option="--buffer", keyword=None),
    _setting(
        "transfer",
        changes_run=True,
        choices=PRECISIONS,
        default=FULL,
        help="the precision the weights are kept at in the store: bfloat16 or float16 halve "
        "the bytes a round, each average still worked in float32 (soma.transfer)",
    ),
    # how its processes wait (soma.timing): not what the run is
    _setting(
        "deadline",
        of="timing",
        config=None,
        type=float,
        default=DEADLINE,
        help="seconds to wait for a round before naming who is missing",
    ),
    _setting("average_deadline", of="timing", option=None, keyword=None),
    _setting(
        "lease",
        of="timing",
        type=float,
        default=LEASE,
        help="on a bucket: seconds an averaging's holder may go without renewing its lease "
        f"before it is taken over (default {LEASE:g})",
    ),
)

# RunSpec's fields that are no setting: where the spec came from (`given`), what it read
# beside its task's options (`other_tasks`), the base its start job found (`base`), and its
# waits, a `Timing` whose fields are settings of their own (`of="timing"`).
NOT_SETTINGS = ("given", "other_tasks", "base", "timing")

BY_FIELD: Mapping[str, Setting] = {s.field: s for s in SETTINGS}

# How a refusal names each field: its config key, its option, its keyword (RunSpec.named).
CONFIG_KEYS = {s.field: s.config for s in SETTINGS if s.config is not None}
OPTIONS = {s.field: s.option for s in SETTINGS if s.option is not None}
# (`mine`: soma.simulate hosts every client, so what its clients are is `clients`)
ARGUMENTS = {s.field: s.keyword for s in SETTINGS if s.keyword is not None} | {"mine": "clients"}


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The run options `soma client` and `soma simulate` share, built from their settings."""
    for setting in SETTINGS:
        if setting.option is None or not setting.flag:
            continue
        flag = dict(setting.flag)
        if callable(flag.get("default")):
            flag["default"] = flag["default"]()
        parser.add_argument(setting.option, **flag)
