"""`soma status`'s line of an averaged round says where its average's arithmetic ran (torch
and CPU capability, soma.round.holders), so a reader whose recomputation differs can see
both sides (soma.arithmetic makes them agree on any IEEE machine)."""

from __future__ import annotations

import torch

import soma
from soma.cli.show import _status_line
from soma.round import status


def test_an_averaged_round_says_what_it_was_computed_under(tmp_path) -> None:
    soma.simulate("soma.tasks.control", clients=2, rounds=1, store=tmp_path / "s", run="r")
    (row,) = status(soma.Store(tmp_path / "s"), "r")
    line = _status_line(row, set())
    cpu = torch.backends.cpu.get_cpu_capability()
    assert f"(computed under torch {torch.__version__}, {cpu})" in line
