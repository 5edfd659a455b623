"""torchrun's entry point for a client that is itself distributed (soma.ranks says how):

    torchrun --nproc-per-node 2 -m soma.cli.ranks -- client --store S --run R ...

Every rank checks the command and its task as `soma client` does; rank 0 then runs it, the
others follow rank 0's training."""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
import torch.distributed as dist

from soma.cli import main as soma
from soma.cli.parser import parser
from soma.config.spec import RunSpec
from soma.errors import SomaError
from soma.ranks import STOP, RanksError, follow, lead
from soma.run.checked import checked
from soma.strategies import has_client_side
from soma.tasks import importable_here


def _task_of(argv: list[str]) -> tuple[Any, Any]:
    """The client's arguments and its task, made and checked as `soma client` makes them."""

    args = parser().parse_args(argv)
    if args.command != "client":
        raise RanksError(
            f"soma.cli.ranks runs `soma client` under torchrun, not `soma {args.command}`: "
            "write `client` first"
        )
    if getattr(args, "buffer", None) is not None:
        raise RanksError(
            "soma.cli.ranks runs synchronous rounds only: drop --buffer (asynchronous rounds)"
        )
    importable_here()
    spec = RunSpec.from_args(args)
    task, strategy = checked(spec)
    if has_client_side(strategy):
        raise RanksError(
            f"strategy {args.strategy!r} changes the clients' local training, which only rank "
            "0 would apply under torchrun: choose a strategy without a client side (fedavg)"
        )
    if not callable(getattr(task, "follow", None)):
        raise RanksError(
            f"task {args.task!r} has no follow(told): it cannot train across ranks; run it "
            "with `soma client` alone, or use a task that does (soma.tasks.resnet)"
        )
    return args, task


def main(argv: list[str] | None = None) -> int:
    """torchrun's entry: every rank checks the command and its task, then rank 0 runs `soma
    client` and the others follow it; a refusal is one `soma: ...` line, on every rank."""

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, task = _task_of(argv)
    except SomaError as error:
        print(f"soma: {error}", file=sys.stderr)
        return 1
    torch.set_num_threads(args.threads)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    try:
        if dist.get_rank() != 0:  # what it took part in, as a line of its own on stdout
            trainings = follow(task)
            said = {"rank": dist.get_rank(), "ranks": dist.get_world_size(), "trainings": trainings}
            print(json.dumps(said), flush=True)
            return 0

        try:
            return soma(argv)
        finally:
            lead(STOP)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
