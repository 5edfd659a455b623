"""The round barrier with nobody in charge (CU15's round questionnaire)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import communicated, same_weights

import soma
from soma.round import (
    AveragerDied,
    Backoff,
    Meeting,
    RoundError,
    RoundIncomplete,
    arrivals,
    average_round,
    contribute,
    holders,
    inputs_key,
    present,
    status,
    weights_of_average,
)
from soma.round.once import Place
from soma.run.gather import gather
from soma.store import Store
from soma.timing import LEASE

torch.set_num_threads(1)
HERE = Path(__file__).parents[1]
QUICK = Backoff(first=0.005, cap=0.05)


def weights(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "fc": {"weight": torch.randn(4, 3, generator=g), "bias": torch.randn(4, generator=g)},
        "norm": {"num_batches_tracked": torch.tensor(seed, dtype=torch.int64)},
    }


def averagings(store: Store, run: str) -> int:
    """How many averagings were computed, counted from the store's own records."""
    return len([n for n in store.bound(f"{run}/round/") if "/computed/" in n])


def M(run: str, round: int, clients: int, **more) -> Meeting:  # noqa: N802
    return Meeting(run, round, clients, **more)


def averaging_place(store: Store, meeting: Meeting) -> Place:
    """Where the meeting's present clients are averaged (the claim a holder would hold)."""
    inputs, _ = arrivals(store, meeting, present(store, meeting))
    return Place(f"{meeting.prefix}/inputs/{inputs_key(meeting.key, inputs)}")


def test_the_only_client_of_a_round_averages_it_itself_and_publishes_it(tmp_path) -> None:
    store = Store(tmp_path)
    mine = weights(1)
    mean = gather(store, mine, run="solo", round=0, clients=1, mine=0, deadline=5, backoff=QUICK)
    assert same_weights(mean, mine)
    assert store.resolve(M("solo", 0, 1).average) is not None
    assert store.resolve(averaging_place(store, M("solo", 0, 1)).claimed) is not None
    assert averagings(store, "solo") == 1


def test_a_client_that_arrives_after_the_average_finds_it_and_does_not_wait(tmp_path) -> None:
    store = Store(tmp_path)
    for k in range(2):
        contribute(store, M("r", 0, 3), weights(k), mine=k)

    def third():
        time.sleep(0.05)
        contribute(store, M("r", 0, 3), weights(2), mine=2)

    threading.Thread(target=third).start()
    first = average_round(store, M("r", 0, 3), deadline=10, backoff=QUICK, lease=LEASE)
    slept: list[float] = []
    late = average_round(store, M("r", 0, 3), deadline=0, sleep=slept.append, lease=LEASE)
    assert late == first and slept == []
    # and a client that gathers late leaves with the published mean at once
    started = time.monotonic()
    mean = gather(store, weights(0), run="r", round=0, clients=3, mine=0, deadline=0)
    assert time.monotonic() - started < 2
    assert same_weights(mean, weights_of_average(store, store.resolve(M("r", 0, 3).average)))


def test_two_runs_sharing_a_directory_are_two_runs_and_two_rounds_are_two_rounds(tmp_path) -> None:
    store = Store(tmp_path)
    a = gather(store, weights(1), run="a", round=0, clients=1, mine=0, deadline=5)
    b = gather(store, weights(2), run="b", round=0, clients=1, mine=0, deadline=5)
    a1 = gather(store, weights(3), run="a", round=1, clients=1, mine=0, deadline=5)
    assert (
        same_weights(a, weights(1)) and same_weights(b, weights(2)) and same_weights(a1, weights(3))
    )
    assert averagings(store, "a") == 2 and averagings(store, "b") == 1
    # a round of run "a" with two clients is not completed by run "b"'s client 1
    contribute(store, M("b", 5, 2), weights(4), mine=1)
    contribute(store, M("a", 5, 2), weights(5), mine=0)
    with pytest.raises(RoundIncomplete, match=r"client 1 never came"):
        average_round(store, M("a", 5, 2), deadline=0.1, backoff=QUICK, lease=LEASE)


def test_the_deadline_says_which_clients_are_missing(tmp_path) -> None:
    store = Store(tmp_path)
    contribute(store, M("r", 3, 4), weights(0), mine=1)
    with pytest.raises(RoundIncomplete) as missing:
        average_round(store, M("r", 3, 4), deadline=0.2, backoff=QUICK, lease=LEASE)
    assert missing.value.missing == [0, 2, 3]
    assert "round 3" in str(missing.value) and "clients 0, 2, 3 never came" in str(missing.value)


@pytest.mark.slow  # soma asks Slurm (squeue, sacct) whether the holder's job lives, where installed
def test_and_says_a_different_thing_when_complete_and_the_average_never_came(tmp_path) -> None:
    store = Store(tmp_path)
    for k in range(2):
        contribute(store, M("r", 0, 2), weights(k), mine=k)
    # Somebody alive (this very process, as far as anyone can tell) claimed it and never published.
    holder = holders.me(role="averaging")
    holder["host"], holder["slurm_job"] = "gpu-node-07", "999999999"
    assert store.claim(averaging_place(store, M("r", 0, 2)).claimed, store.put_value(holder))
    with pytest.raises(AveragerDied) as died:
        average_round(store, M("r", 0, 2), deadline=0.2, backoff=QUICK, lease=LEASE)
    message = str(died.value)
    assert "complete" in message and "never published" in message
    assert "gpu-node-07" in message and "999999999" in message and str(holder["pid"]) in message
    assert holder["when"] in message
    assert not isinstance(died.value, RoundIncomplete)


@pytest.mark.slow
def test_a_holder_that_is_provably_gone_is_taken_over_and_the_average_published_once(
    tmp_path,
) -> None:
    store = Store(tmp_path)
    for k in range(2):
        contribute(store, M("r", 0, 2), weights(k), mine=k)
    dead = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from soma.round import holders; print(json.dumps(holders.me()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    corpse = json.loads(dead.stdout)
    assert holders.gone(corpse)
    place = averaging_place(store, M("r", 0, 2))
    assert store.claim(place.claimed, store.put_value(corpse))
    digest = average_round(store, M("r", 0, 2), deadline=5, backoff=QUICK, lease=LEASE)
    assert store.resolve(M("r", 0, 2).average) == digest
    assert store.bound(place.takeovers) == [f"{place.takeovers}1"]
    assert averagings(store, "r") == 1
    # a second retry finds it published and changes nothing
    assert average_round(store, M("r", 0, 2), deadline=0, lease=LEASE) == digest


def test_the_size_travels_in_the_record_and_the_average_weighs_by_it(tmp_path) -> None:
    store = Store(tmp_path)
    contribute(store, M("r", 0, 2), weights(1), mine=0, size=10)
    contribute(store, M("r", 0, 2), weights(2), mine=1, size=1)
    assert store.recall(M("r", 0, 2).client(1))["size"] == 1
    digest = average_round(store, M("r", 0, 2), deadline=5, backoff=QUICK, lease=LEASE)
    record = store.recall_digest(digest)
    assert same_weights(
        weights_of_average(store, digest), soma.fedavg([weights(1), weights(2)], sizes=[10, 1])
    )
    assert [(i["client"], i["size"]) for i in record["inputs"]] == [(0, 10), (1, 1)]
    assert [i["weights"] for i in record["inputs"]] == [store.put_value(weights(k)) for k in (1, 2)]
    assert [i["record"] for i in record["inputs"]] == [
        store.resolve(M("r", 0, 2).client(k)) for k in range(2)
    ]
    assert record["averaged_by"]["pid"] == os.getpid()


def test_all_of_a_rounds_clients_say_a_size_or_none_does(tmp_path) -> None:
    store = Store(tmp_path)
    contribute(store, M("r", 0, 3), weights(1), mine=0, size=10)
    contribute(store, M("r", 0, 3), weights(2), mine=1)
    contribute(store, M("r", 0, 3), weights(3), mine=2, size=5)
    with pytest.raises(RoundError, match=r"clients \[1\] did not"):
        average_round(store, M("r", 0, 3), deadline=1, backoff=QUICK, lease=LEASE)
    assert store.resolve(M("r", 0, 3).average) is None


def test_no_sizes_means_equal_weights(tmp_path) -> None:
    store = Store(tmp_path)
    for k in range(3):
        contribute(store, M("r", 0, 3), weights(k), mine=k)
    digest = average_round(store, M("r", 0, 3), deadline=5, lease=LEASE)
    assert same_weights(
        weights_of_average(store, digest), soma.fedavg([weights(k) for k in range(3)])
    )


def test_a_client_that_rewrites_its_export_after_the_average_changes_nothing_published(
    tmp_path,
) -> None:
    store = Store(tmp_path)
    for k in range(2):
        contribute(store, M("r", 0, 2), weights(k), mine=k)
    digest = average_round(store, M("r", 0, 2), deadline=5, lease=LEASE)
    with pytest.raises(RoundError, match="client 1 already contributed"):  # claimed, not bound
        contribute(store, M("r", 0, 2), weights(99), mine=1)
    assert average_round(store, M("r", 0, 2), deadline=0, lease=LEASE) == digest
    assert same_weights(weights_of_average(store, digest), soma.fedavg([weights(0), weights(1)]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mine": 4}, "client 4"),
        ({"mine": -1}, "client -1"),
        ({"clients": 0}, "clients"),
        ({"round": -1}, "round"),
        ({"run": ""}, "run name"),
        ({"size": -3}, "size"),
    ],
)
def test_bad_arguments_are_refused_by_name(tmp_path, kwargs, match) -> None:
    args = {"run": "r", "round": 0, "clients": 4, "mine": 0, "size": None} | kwargs
    with pytest.raises(RoundError, match=match):
        gather(Store(tmp_path), weights(0), **args, deadline=0)
    assert Store(tmp_path).bound() == []


# --- real processes ----------------------------------------------------------------------


def soma_client(
    store: Path, mine: int, *, rounds: int, clients: int, deadline: float = 120, examples: int = 64
):
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "round_worker.py"),
            "client",
            "--store",
            str(store),
            "--run",
            "ctl",
            "--rounds",
            str(rounds),
            "--clients",
            str(clients),
            "--mine",
            str(mine),
            "--deadline",
            str(deadline),
            "--option",
            f"examples={examples}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_four_processes_one_folder_two_rounds(tmp_path) -> None:
    clients = [soma_client(tmp_path, k, rounds=2, clients=4) for k in range(4)]
    outputs = communicated(clients, 300, fail_fast=True)
    for c, (_, err) in zip(clients, outputs, strict=True):
        assert c.returncode == 0, err
    lines = [[json.loads(line) for line in out.splitlines()] for out, _ in outputs]
    finals = {ls[1]["average"] for ls in lines}
    assert len(finals) == 1, "all four leave with the same weights"
    store = Store(tmp_path)
    rows = status(store, "ctl")
    assert [row["round"] for row in rows] == [0, 1], "one meeting a round"
    assert finals == {rows[1]["average"]}
    assert averagings(store, "ctl") == 2, "exactly two averagings, which nobody arranged"
    for r in range(2):
        record = store.recall_digest(rows[r]["average"])
        assert [i["client"] for i in record["inputs"]] == [0, 1, 2, 3]
        expected = soma.fedavg(
            [store.recall_digest(i["weights"]) for i in record["inputs"]],
            sizes=[i["size"] for i in record["inputs"]],
        )
        assert same_weights(store.recall_digest(record["weights"]), expected)
    evaluations = {json.dumps(ls[-1]["evaluation"]) for ls in lines}
    assert len(evaluations) == 1
    # and one of them logs each round's test metrics, as the workflow's evaluation does
    progress = [err for _, err in outputs if "round 1/1: " in err]
    assert len(progress) == 1 and "round 0/1: loss " in progress[0], progress


@pytest.mark.slow
def test_a_client_that_never_starts_stops_the_others_by_name(tmp_path) -> None:
    clients = [soma_client(tmp_path, k, rounds=1, clients=4, deadline=3) for k in (0, 1, 3)]
    for c, (out, err) in zip(clients, communicated(clients, 120), strict=True):
        assert c.returncode == 1, (out, err)
        assert "client 2 never came" in err
    assert all(row["average"] is None for row in status(Store(tmp_path), "ctl"))
    assert not [n for n in Store(tmp_path).bound() if n.endswith("/claimed")]


@pytest.mark.slow
def test_soma_status_says_who_wrote_who_is_missing_and_the_average(tmp_path) -> None:
    store = Store(tmp_path)
    for k in (0, 2):
        contribute(store, M("ctl", 0, 3), weights(k), mine=k)
    gather(store, weights(5), run="ctl", round=1, clients=1, mine=0, deadline=5)

    def status(*flags: str) -> str:
        command = [sys.executable, "-m", "soma.cli", "status", "--store", str(tmp_path)]
        command += ["--run", "ctl", "--clients", "3", *flags]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    rows = json.loads(status("--json"))
    assert rows[0]["written"] == [0, 2] and rows[0]["missing"] == [1] and rows[0]["average"] is None
    assert rows[1]["average"] is not None
    assert rows[1]["average"] == soma.round.status(store, "ctl")[1]["average"]
    assert rows[1]["averaging"]["pid"] == os.getpid()
    human = status()
    assert "missing [1]" in human and "average " in human


def test_eight_threads_that_find_the_round_complete_average_it_once(tmp_path) -> None:
    store = Store(tmp_path)
    for k in range(3):
        contribute(store, M("r", 0, 3), weights(k), mine=k)
    start = threading.Barrier(8)
    results: list[str] = []

    def racer() -> None:
        start.wait()
        results.append(average_round(store, M("r", 0, 3), deadline=10, backoff=QUICK, lease=LEASE))

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 8
    assert averagings(store, "r") == 1


# --- what can be refused is refused before the claim, for every client ----------------------


def claims(store: Store) -> list[str]:
    return [n for n in store.bound() if n.endswith("/claimed") or "/takeover/" in n]


def test_a_client_with_another_network_fails_every_client_with_the_reason_and_nothing_is_claimed(
    tmp_path,
) -> None:
    store = Store(tmp_path)
    odd = weights(1)
    odd["fc"]["weight"] = torch.zeros(5, 3)
    errors: list[Exception] = []

    def client(k: int, export: dict) -> None:
        try:
            gather(store, export, run="r", round=0, clients=2, mine=k, deadline=5, backoff=QUICK)
        except RoundError as error:
            errors.append(error)

    threads = [threading.Thread(target=client, args=a) for a in ((0, weights(0)), (1, odd))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 2, "both clients are told"
    for error in errors:
        message = str(error)
        assert "two different networks" in message and "'fc' key 'weight'" in message
        assert "(4, 3) in client 0" in message and "(5, 3) in client 1" in message
        assert not isinstance(error, AveragerDied)
    assert claims(store) == [] and averagings(store, "r") == 0


@pytest.mark.parametrize(
    ("sizes", "match"),
    [((1e308, 1e308), "add up to inf"), ((0, 0), "add up to 0")],
)
def test_sizes_that_add_up_to_nothing_or_overflow_are_refused_before_the_claim(
    tmp_path, sizes, match
) -> None:
    store = Store(tmp_path)
    for k, size in enumerate(sizes):
        contribute(store, M("r", 0, 2), weights(k), mine=k, size=size)
    with pytest.raises(RoundError, match=match):
        average_round(store, M("r", 0, 2), deadline=1, backoff=QUICK, lease=LEASE)
    assert claims(store) == []


def test_a_strategys_own_precondition_is_refused_before_the_claim(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = M("r", 0, 3, strategy="krum", options={"f": 1})
    for k in range(3):
        contribute(store, meeting, weights(k), mine=k)
    with pytest.raises(soma.StrategyError, match="krum"):
        average_round(store, meeting, deadline=1, backoff=QUICK, lease=LEASE)
    assert claims(store) == []


def test_a_strategy_that_steps_from_the_start_needs_to_be_told_the_start(tmp_path) -> None:
    store = Store(tmp_path)
    with pytest.raises(RoundError, match="pass start="):
        gather(store, weights(0), run="r", round=0, clients=1, mine=0, strategy="fedadam")
    start = store.put_value(weights(7))
    mean = gather(
        store, weights(0), run="r", round=0, clients=1, mine=0, strategy="fedadam", start=start
    )
    assert not same_weights(mean, weights(0)) and claims(store) != []


# --- a round is remembered by what went into it ------------------------------------------------


@pytest.mark.slow
def test_two_clients_given_other_task_options_both_say_the_key_at_once(tmp_path) -> None:
    tic = time.monotonic()
    clients = [
        soma_client(tmp_path, k, rounds=1, clients=2, deadline=120, examples=examples)
        for k, examples in ((0, 64), (1, 32))
    ]
    said = [err for _, err in communicated(clients, 60)]
    assert time.monotonic() - tic < 30, "told at once, not at the deadline"
    assert [c.returncode for c in clients] == [1, 1], said
    first, second = "task_options.examples 64", "task_options.examples 32"
    assert f"client 1 joined with {second}; you have {first}" in said[0]
    assert f"client 0 joined with {first}; you have {second}" in said[1]


def test_a_client_in_an_averaged_or_abandoned_meeting_of_the_round_is_no_rival(tmp_path) -> None:
    store = Store(tmp_path)
    # an earlier meeting of round 0, averaged: past, whoever wrote it
    past = M("r", 0, 2, config={"seed": 1})
    for k in range(2):
        contribute(store, past, weights(k), mine=k)
    average_round(store, past, deadline=5, backoff=QUICK, lease=LEASE)
    # an abandoned one: its client's process is gone (a crashed run on this host)
    gone = holders.me()
    gone["pid_start"] = -1
    old = M("r", 0, 2, config={"seed": 2})
    contribute(store, old, weights(2), mine=1)
    name = old.client(1)
    record = store.recall(name)
    store.keep(name, {**record, "by": gone})
    contribute(store, M("r", 0, 2), weights(3), mine=0)
    with pytest.raises(RoundIncomplete, match="client 1 never came"):
        average_round(store, M("r", 0, 2), deadline=0.5, backoff=QUICK, lease=LEASE)
    # but the same record written by somebody who may be alive: told at once, naming the key
    store.keep(name, record)
    with pytest.raises(
        soma.round.MeetingsDiffer, match="client 1 joined with seed 2; you have seed n"
    ):
        average_round(store, M("r", 0, 2), deadline=60, backoff=QUICK, lease=LEASE)


def test_who_finds_a_rival_leaves_it_a_note_it_heeds_when_the_finder_is_gone(tmp_path) -> None:
    store = Store(tmp_path)
    mine, theirs = M("r", 0, 2, config={"seed": 1}), M("r", 0, 2, config={"seed": 2})
    contribute(store, theirs, weights(1), mine=1)  # still training its other clients
    contribute(store, mine, weights(0), mine=0)
    with pytest.raises(soma.round.MeetingsDiffer, match="client 1 joined with seed 2"):
        average_round(store, mine, deadline=60, backoff=QUICK, lease=LEASE)
    # the finder has stopped: its record is a gone process's, and only the note tells
    gone = holders.me()
    gone["pid_start"] = -1
    store.keep(mine.client(0), {**store.recall(mine.client(0)), "by": gone})
    with pytest.raises(soma.round.MeetingsDiffer, match="client 0 joined with seed 1"):
        # the note is read at once
        average_round(store, theirs, deadline=5, backoff=QUICK, lease=LEASE)
    # a note older than this process is some run long gone's: no rival then
    (note,) = store.bound(f"{theirs.prefix}/apart/")
    store.keep(note, {**store.recall(note), "at": 0})
    with pytest.raises(RoundIncomplete, match="client 0 never came"):
        average_round(store, theirs, deadline=0.5, backoff=QUICK, lease=LEASE)


def test_only_another_start_is_said_so(tmp_path) -> None:
    store = Store(tmp_path)
    start = store.put_value(weights(9))
    contribute(store, M("r", 1, 2, start=start), weights(1), mine=1)
    contribute(store, M("r", 1, 2), weights(2), mine=0)
    # told at its first look: under a deadline of 5 s, never looking fails in 5 s, not 60
    with pytest.raises(soma.round.MeetingsDiffer, match="same settings but another start") as e:
        average_round(store, M("r", 1, 2), deadline=5, backoff=QUICK, lease=LEASE)
    assert f"start weights {start[:12]}; you have start weights null" in str(e.value)


def test_one_run_name_with_other_inputs_is_another_averaging_never_the_old_answer(tmp_path) -> None:
    store = Store(tmp_path)
    first = gather(store, weights(1), run="same", round=0, clients=1, mine=0, start=None)
    # the same name, another start: a second run, a second averaging, its own answer
    other = store.put_value(weights(50))
    second = gather(store, weights(2), run="same", round=0, clients=1, mine=0, start=other)
    assert same_weights(first, weights(1)) and same_weights(second, weights(2))
    # another client count, another strategy option: apart again
    config = {"seed": 3}
    third = gather(store, weights(3), run="same", round=0, clients=1, mine=0, config=config)
    assert same_weights(third, weights(3))
    assert averagings(store, "same") == 3
    assert len(status(store, "same")) == 3, "three meetings of round 0"


@pytest.mark.slow
def test_soma_client_twice_under_one_run_name_with_another_seed_trains_again(tmp_path) -> None:
    def run(seed: int) -> dict:
        command = [sys.executable, str(HERE / "round_worker.py"), "client", "--store"]
        command += [str(tmp_path), "--run", "same", "--rounds", "1", "--clients", "1"]
        command += ["--mine", "0", "--seed", str(seed), "--option", "examples=32"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[0])

    a, b = run(0), run(1)
    assert a["weights"] != b["weights"], "the second run got the first run's average"
    record = Store(tmp_path).recall_digest(b["average"])
    assert record["inputs"][0]["weights"] == b["weights"] and record["start"] != a["weights"]
    assert run(0)["average"] == a["average"], "the same inputs find the same average"
