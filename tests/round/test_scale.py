"""Scale: several clients in one process, and hierarchical averaging (soma.round.tree)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import helpers
import pytest
import torch
from helpers import NO_BASELINES, TINY, ok, same_weights

import soma
from soma.round import Backoff, Meeting, RoundError, contribute, holders, once, status, tree
from soma.run.gather import gather
from soma.store import Store
from soma.timing import LEASE

torch.set_num_threads(1)
HERE = Path(__file__).parents[1]
QUICK = Backoff(first=0.005, cap=0.05)
# a tree's waits, which tree.reduce takes from its round (soma.timing) and has no default for
WAITS = {"deadline": 60, "lease": LEASE, "backoff": QUICK, "signing": None}


def weights(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "fc": {"weight": torch.randn(4, 3, generator=g), "bias": torch.randn(4, generator=g)},
        "norm": {"num_batches_tracked": torch.tensor(seed, dtype=torch.int64)},
    }


# --- several clients in one process --------------------------------------------------------


def clients_of_processes(store: Path, groups: list[str], *flags: str, clients: int) -> list:
    """Run `soma client` once per group of clients (`--mine` text); every process's lines."""
    args = ["client", "--store", str(store), "--run", "ctl", "--rounds", "3"]
    args += ["--clients", str(clients), "--deadline", "120", "--option", "examples=32", *flags]
    return helpers.soma_processes(args, groups, timeout=300, every_line=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--strategy", "scaffold"],  # each hosted client keeps its own c_i
        ["--participation", "0.5"],  # hosted clients that sit a round out
        ["--tree", "2"],
    ],
    ids=["fedavg", "scaffold", "sampled", "tree"],
)
def test_clients_hosted_together_train_the_same_bits_as_one_per_process(tmp_path, flags) -> None:
    alone = clients_of_processes(tmp_path / "a", ["0", "1", "2", "3"], *flags, clients=4)
    together = clients_of_processes(tmp_path / "b", ["0-1", "2,3"], *flags, clients=4)
    one = clients_of_processes(tmp_path / "c", ["0-3"], *flags, clients=4)
    for r in range(3):
        digests = {ls[r]["weights"] for ls in alone + together + one}
        assert len(digests) == 1, f"round {r}: {digests}"
    assert together[0][0]["clients"] == [0, 1] and alone[0][0]["client"] == 0
    assert {json.dumps(ls[-1]["evaluation"]) for ls in alone + one} == {
        json.dumps(one[0][-1]["evaluation"])
    }
    rows = status(Store(tmp_path / "b"), "ctl")
    assert [row["round"] for row in rows] == [0, 1, 2]


@pytest.mark.slow
def test_a_process_refuses_a_client_the_run_does_not_have(tmp_path) -> None:
    command = [sys.executable, "-m", "soma.cli", "client", "--store", str(tmp_path / "s")]
    command += ["--run", "r", "--rounds", "1", "--clients", "4", "--mine", "2-4"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--mine: client 4 is not one of the run's clients 0..3" in done.stderr


def test_per_task_hosts_a_block_of_clients_per_slurm_task(tmp_path) -> None:
    from soma.cli import parser

    args = parser().parse_args(
        ["client", "--store", "s", "--run", "r", "--rounds", "1", "--clients", "10"]
        + ["--per-task", "4"]
    )
    from soma.cli import _mine_from_slurm

    for procid, mine in [("0", [0, 1, 2, 3]), ("2", [8, 9])]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_PROCID", procid)
            assert _mine_from_slurm(args) == mine


# --- the tree, pure --------------------------------------------------------------------------


def test_widths_and_children_cover_every_input_once() -> None:
    assert tree.widths(1, 4) == [1]
    assert tree.widths(4, 4) == [1]
    assert tree.widths(5, 4) == [2, 1]
    assert tree.widths(10_000, 32) == [313, 10, 1]
    for count, fan_in in [(5, 2), (17, 4), (100, 7)]:
        below = count
        for width in tree.widths(count, fan_in):
            covered = [j for i in range(width) for j in tree.children(i, below, fan_in)]
            assert covered == list(range(below))
            below = width
    with pytest.raises(tree.TreeError, match="fan-in 1 must be an integer >= 2"):
        tree.widths(4, 1)


# --- the tree over a store ---------------------------------------------------------------------


def leaves_in(store: Store, count: int, *, sizes=None) -> list[tree.Leaf]:
    sizes = sizes or [k + 1 for k in range(count)]
    return [tree.Leaf(store.put_value(weights(k)), float(sizes[k])) for k in range(count)]


def test_a_tree_of_one_node_is_fedavg_bit_for_bit(tmp_path) -> None:
    store = Store(tmp_path)
    leaves = leaves_in(store, 5)
    root = tree.reduce(store, "t", leaves, 8, **WAITS)
    flat = soma.fedavg([weights(k) for k in range(5)], sizes=[1, 2, 3, 4, 5])
    assert same_weights(store.recall_digest(root.mean), flat) and root.weight == 15


def test_a_deep_tree_is_the_weighted_mean_and_keeps_the_first_count(tmp_path) -> None:
    store = Store(tmp_path)
    leaves = leaves_in(store, 23, sizes=[(k % 5) for k in range(23)])  # some weigh nothing
    root = tree.reduce(store, "t", leaves, 3, **WAITS)
    mean = store.recall_digest(root.mean)
    flat = soma.fedavg([weights(k) for k in range(23)], sizes=[k % 5 for k in range(23)])
    for node in flat:
        for key in flat[node]:
            torch.testing.assert_close(mean[node][key], flat[node][key], rtol=1e-6, atol=1e-6)
    assert int(mean["norm"]["num_batches_tracked"]) == 0, "the first input's count stands"
    assert root.weight == sum(k % 5 for k in range(23))


def test_the_same_inputs_give_the_same_bits_whoever_does_which_node(tmp_path) -> None:
    alone = Store(tmp_path / "alone")
    root_alone = tree.reduce(alone, "t", leaves_in(alone, 40), 3, **WAITS)
    shared = Store(tmp_path / "shared")
    leaves = leaves_in(shared, 40)
    roots: dict[int, tree.Node] = {}

    def helper(k: int) -> None:
        me = {**holders.me(), "helper": k}
        roots[k] = tree.reduce(shared, "t", leaves, 3, me=me, **WAITS)

    threads = [threading.Thread(target=helper, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {r.mean for r in roots.values()} == {root_alone.mean}, "same bits, any helper"
    every = list(tree.walk(shared, "t", 40, 3))
    assert len(every) == 14 + 5 + 2 + 1
    assert all(once.computations(shared, place) == 1 for _, _, place in every), "exactly once"
    doers = {shared.resolve(f"{place.prefix}/claimed") for _, _, place in every}
    assert len(doers) > 1, "the work was shared, not done by one helper"


@pytest.mark.slow
def test_a_node_whose_holder_died_is_taken_over(tmp_path) -> None:
    store = Store(tmp_path)
    leaves = leaves_in(store, 6)
    dead = subprocess.run(
        [sys.executable, "-c", "import json, soma.round.holders as h; print(json.dumps(h.me()))"],
        capture_output=True,
        text=True,
        check=True,
    )
    store.claim(tree.node_place("t", 1, 0).claimed, store.put_value(json.loads(dead.stdout)))
    once_every = once.HOLDER_CHECK_EVERY
    once.HOLDER_CHECK_EVERY = 0.0
    try:
        root = tree.reduce(store, "t", leaves, 2, **{**WAITS, "deadline": 30})
    finally:
        once.HOLDER_CHECK_EVERY = once_every
    assert store.resolve(tree.node_place("t", 1, 0).takeovers + "1") is not None
    flat = soma.fedavg([weights(k) for k in range(6)], sizes=[1, 2, 3, 4, 5, 6])
    for node in flat:
        for key in flat[node]:
            torch.testing.assert_close(store.recall_digest(root.mean)[node][key], flat[node][key])


def test_gather_through_a_tree_records_it_and_keys_the_meeting_by_its_fan_in(tmp_path) -> None:
    store = Store(tmp_path)
    means = {}

    def client(k: int) -> None:
        means[k] = gather(
            store, weights(k), run="r", round=0, clients=5, mine=k, size=k + 1, tree=2,
            deadline=60, backoff=QUICK,
        )  # fmt: skip

    threads = [threading.Thread(target=client, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(means) == 5 and all(same_weights(means[k], means[0]) for k in means)
    (row,) = status(store, "r")
    record = store.recall_digest(row["average"])
    assert record["tree"]["fan_in"] == 2 and record["tree"]["weight"] == 15
    assert Meeting("r", 0, 5, tree=2).key != Meeting("r", 0, 5).key
    assert "tree" not in Meeting("r", 0, 5).identity(), "a flat run keeps its old key"


@pytest.mark.parametrize("strategy", ["median", "krum", "scaffold"])
def test_a_strategy_that_needs_every_update_is_refused_under_a_tree(tmp_path, strategy) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 3, start=store.put_value(weights(0)), strategy=strategy, tree=2)
    for k in range(3):
        contribute(store, meeting, weights(k), mine=k, size=1)
    from soma.round import average_round

    with pytest.raises(RoundError, match=f"strategy '{strategy}' needs every client's update"):
        average_round(store, meeting, deadline=5, backoff=QUICK, lease=LEASE)
    assert not [n for n in store.bound() if n.endswith("/claimed")], "refused before any claim"


# --- the workflow: a batch of clients per job, the tree -------------------------------------------


def snakemake(workdir: Path, *config: str, dry: bool = False, until: str = "") -> str:
    """A run of tiny.yaml without baselines (helpers.snakemake), or its dry run; its output.
    `until`: a target under results/ (its summary, model and best, read by no test here, are
    then not made: the tiny run makes them, tests/tiny_run.py)."""
    args = ["-n"] if dry else ["--cores", "2"]
    args += [f"results/{until}"] if until else []  # before --config, which takes the rest
    return ok(helpers.snakemake(workdir, *args, "--config", *config, config=(TINY, NO_BASELINES)))


def averages(workdir: Path, run: str, rounds: int = 2) -> list[str]:
    base = workdir / "results" / run / "round"
    return [json.loads((base / f"{r}/average.json").read_text())["weights"] for r in range(rounds)]


@pytest.mark.workflow
def test_a_job_of_several_clients_trains_the_bits_of_a_job_per_client(tmp_path) -> None:
    """SCAFFOLD with sampling: each client in a batch keeps its own c_i, found in the batch
    receipt of the last round it trained in, and the batch holds each client's own receipt."""
    run = ["clients=4", "participation=3", "strategy=scaffold", "run=batched"]
    per_job = {"one": (), "batch": ("clients_per_job=2",), "round": ("clients_per_job=3",)}
    # what is read below: every round's averages and the last round's files (a job per
    # client: its averages and client receipts)
    until = {way: "batched/round/1/evaluation.json" for way in per_job}
    until["one"] = "batched/round/1/average.json"

    def made(way: str) -> str:
        return snakemake(tmp_path / way, *run, *per_job[way], until=until[way])

    # the three runs (each its own folder and store) go side by side; "round": one job a round
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(made, per_job))
    assert averages(tmp_path / "one", "batched") == averages(tmp_path / "batch", "batched")
    assert averages(tmp_path / "one", "batched") == averages(tmp_path / "round", "batched")
    logs = tmp_path / "round" / "logs" / "batched" / "round"
    assert sorted(p.name for p in (logs / "1").iterdir()) == ["evaluation.log", "round.log"]
    base = tmp_path / "batch" / "results" / "batched" / "round"
    assert sorted(p.name for p in (base / "1").rglob("*.json")) == [
        "0.json", "1.json", "average.json", "evaluation.json"
    ]  # fmt: skip
    for r in range(2):
        for batch in sorted((base / str(r) / "batch").glob("*.json")):
            for entry in json.loads(batch.read_text())["clients"]:
                alone = tmp_path / "one" / "results" / "batched" / "round" / str(r)
                client = json.loads((alone / "client" / f"{entry['client']}.json").read_text())
                assert entry == client, "the batch holds each client's receipt, as it is alone"


@pytest.mark.workflow
def test_the_workflow_with_a_tree_trains_the_bits_of_soma_client_with_a_tree(tmp_path) -> None:
    config = ("clients=5", "run=treed", "tree={fan_in: 2}", "clients_per_job=5")
    snakemake(tmp_path, *config, until="treed/round/1/average.json")
    record = Store(tmp_path / "store").recall_digest(
        status(Store(tmp_path / "store"), "treed")[0]["average"]
    )
    assert record["tree"]["fan_in"] == 2, "the round went through the tree"
    command = [sys.executable, "-m", "soma.cli", "client", "--store", str(tmp_path / "cli")]
    command += ["--run", "treed", "--rounds", "2", "--clients", "5", "--mine", "0-4"]
    command += ["--task", "soma.tasks.digits", "--tree", "2"]
    for option in ("labels_per_client=5", "model=softmax", "epochs=1"):  # tiny.yaml's
        command += ["--option", option]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if '"round"' in line]
    assert [line["weights"] for line in lines] == averages(tmp_path, "treed")


@pytest.mark.workflow
def test_a_thousand_clients_in_jobs_of_fifty_make_a_small_dag(tmp_path) -> None:
    plan = snakemake(
        tmp_path, "clients=1000", "rounds=10", "task=soma.tasks.control", "metric=loss",
        "clients_per_job=50", "tree={fan_in: 32}", dry=True,
    )  # fmt: skip
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", plan, flags=re.MULTILINE))
    assert counts["train_batch"] == "200" and counts["average"] == "10"


@pytest.mark.workflow
def test_a_tree_with_a_strategy_that_needs_every_update_stops_at_the_start_job(tmp_path) -> None:
    config = ("strategy=median", "tree={fan_in: 2}")
    done = helpers.snakemake(
        tmp_path, "--cores", "1", "--config", *config, config=(TINY, NO_BASELINES)
    )
    assert done.returncode != 0
    log = (tmp_path / "logs" / "tiny" / "start.log").read_text()
    assert "config keys `strategy`/`tree`: strategy 'median' needs every client's update" in log


def test_a_round_of_many_clients_files_their_records_by_thousands(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = Meeting("big", 0, 2500, expected=(3, 1999, 2001), quorum=3)
    assert meeting.client(1999) == f"{meeting.prefix}/client/1/1999"
    assert Meeting("small", 0, 1000).client(999).endswith("/client/999")
    for k in (3, 1999, 2001):
        contribute(store, meeting, weights(k), mine=k, size=1)
    from soma.round import present

    assert present(store, meeting) == [3, 1999, 2001]
    folders = {n.rsplit("/", 2)[1] for n in store.bound(f"{meeting.prefix}/client/")}
    assert folders == {"0", "1", "2"}
    (row,) = status(store, "big")
    assert row["written"] == [3, 1999, 2001]
