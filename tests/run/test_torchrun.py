"""A client that is itself distributed: `soma client` under torchrun (soma.ranks, its entry
soma.cli.ranks), two CPU processes with gloo, against the same client in one process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from helpers import HANG, soma, soma_env

from soma import ranks
from soma.cli import ranks as entry
from soma.round.average import weights_of_average
from soma.store import Store

TASK = "soma.tasks.resnet"
TINY = {"width": 4, "image_size": 8, "examples": 24, "test_examples": 16, "batch_size": 8,
        "device": "cpu"}  # fmt: skip
ROUNDS = 2


def client_args(store: Path) -> list[str]:
    options = [x for k, v in TINY.items() for x in ("--option", f"{k}={v}")]
    return ["client", "--store", str(store), "--run", "one", "--rounds", str(ROUNDS),
            "--clients", "1", "--mine", "0", "--task", TASK, *options]  # fmt: skip


def last_weights(store: Path, out: str) -> dict:
    """The export of the run's last average, found by the digest its last round line names."""
    rounds = [line for line in map(json.loads, out.splitlines()) if "round" in line]
    assert [line["round"] for line in rounds] == list(range(ROUNDS)), out
    return weights_of_average(Store(str(store)), rounds[-1]["average"])


def test_two_ranks_train_one_client_as_one_process_does_up_to_rounding(tmp_path):
    """Two ranks each compute the gradient of a fixed half of every batch and gloo averages
    them, where one process computes the whole batch's at once: the same sum, added in
    another order, so the bits differ by rounding (float addition is not associative), and
    they are compared to a tolerance instead; the rest is exact: the same nodes, keys and
    shapes, the same data (each rank draws the client's shard itself), both ranks in every
    round's training (rank 1 says how many it took part in), and rank 0's export is the
    client's contribution. GroupNorm (not BatchNorm) makes the two computations the same
    function of the batch: BatchNorm would normalize each rank's half by its own statistics."""
    ranked = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", "-m", "soma.cli.ranks", "--", *client_args(tmp_path / "ranked")],
        cwd=tmp_path, env=soma_env(), capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert ranked.returncode == 0, ranked.stderr[-3000:]
    followed = [json.loads(x) for x in ranked.stdout.splitlines() if '"rank"' in x]
    assert followed == [{"rank": 1, "ranks": 2, "trainings": ROUNDS}], ranked.stdout
    alone = soma(*client_args(tmp_path / "alone"), cwd=tmp_path, env=soma_env(), timeout=HANG)
    assert alone.returncode == 0, alone.stderr[-3000:]
    two = last_weights(tmp_path / "ranked", ranked.stdout)
    one = last_weights(tmp_path / "alone", alone.stdout)
    assert two.keys() == one.keys()
    for node in one:
        assert two[node].keys() == one[node].keys()
        for key in one[node]:
            a, b = two[node][key], one[node][key]
            assert a.shape == b.shape and a.dtype == b.dtype
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), (node, key, (a - b).abs().max())


def test_a_task_that_cannot_follow_is_refused_on_every_rank_before_anything(tmp_path):
    """Without --task, `soma client` trains the control task, which has no follow(). Each rank
    refuses on its own (the in-process test below: `main` returns 1); which ranks get to say
    so here is torchrun's race: it ends the others when the first one exits."""
    refused = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", "-m", "soma.cli.ranks", "--", "client", "--store", str(tmp_path / "store"), "--run",
         "one", "--rounds", "1", "--clients", "10", "--mine", "0"],
        cwd=tmp_path, env=soma_env(), capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert refused.returncode != 0
    assert refused.stderr.count("has no follow(told)") >= 1, refused.stderr[-3000:]
    assert not (tmp_path / "store").exists()


def test_the_ranks_shares_of_a_batch_are_fixed_disjoint_and_cover_it():
    for n in (1, 7, 8, 33):
        for size in (1, 2, 3):
            taken = [list(range(n))[ranks.share(n, rank, size)] for rank in range(size)]
            assert sum(taken, []) == list(range(n)), (n, size, taken)
            assert max(map(len, taken)) - min(map(len, taken)) <= 1


def test_outside_torchrun_there_is_one_rank_and_it_trains_where_the_task_says():
    assert ranks.world() == (0, 1)
    assert ranks.local_device(torch.device("cpu")) == torch.device("cpu")


def test_a_strategy_with_a_client_side_is_refused_before_anything(tmp_path, capsys):
    """Only rank 0 would apply FedProx's proximal term: refused, naming the strategy, before
    the process group is made or the store written (in-process: main() refuses first)."""
    args = [*client_args(tmp_path / "store"), "--strategy", "fedprox"]
    assert entry.main(args) == 1
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "strategy 'fedprox'" in said[0] and said[0].startswith("soma: ")
    assert not (tmp_path / "store").exists()
