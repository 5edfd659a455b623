"""The `soma` command line: the client script every Slurm task runs, a run's status, its model.

Each task is client `$SLURM_PROCID` unless `--mine` says otherwise.

    srun -n 4 soma client --store /shared/soma --run cifar --rounds 10 --clients 4
    soma simulate --rounds 10 --clients 4 [--store /tmp/s]   every client in this process
    soma status --store /shared/soma --run cifar [--json]
    soma export --store /shared/soma --run cifar [--round 9 | --best] -o cifar.safetensors
    soma verify --store /shared/soma [--run cifar]      exit 1 when anything is damaged
    soma repair --store /shared/soma [--run cifar] [--dry-run]
    soma audit --store /shared/soma --run cifar [--roster F] [--json] [--prov F]   read-only
    soma gc --store /shared/soma [--keep-runs cifar ... [--force]] [--dry-run] [--min-age 1h]
"""

from __future__ import annotations

import logging
import sys

from soma.cli.parser import _mine_from_slurm, check_arguments, one_line, parser
from soma.errors import SomaError

__all__ = ["_mine_from_slurm", "main", "one_line", "parser"]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
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
