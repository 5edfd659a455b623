"""Participation: who takes part in a round, partial rounds with a quorum, drop-outs, and
exports that would poison the average (issue 10), in the library and under `soma client`."""

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

import soma
from soma.config.participation import ParticipationError, policy, quorum_size, sample_size, sampled
from soma.round import (
    Backoff,
    Meeting,
    Refused,
    RoundIncomplete,
    average_round,
    contribute,
    drop,
    status,
    weights_of_average,
)
from soma.store import Store
from soma.timing import LEASE

torch.set_num_threads(1)
HERE = Path(__file__).parents[1]
FIXTURES = HERE / "fixtures"
QUICK = Backoff(first=0.005, cap=0.05)


def weights(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"weight": torch.randn(4, 3, generator=g), "bias": torch.randn(4, generator=g)}}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


# --- sampling, pure arithmetic ----------------------------------------------------------------


def test_a_sample_is_drawn_from_the_seed_and_the_round_and_nothing_else() -> None:
    draws = [sampled(0, r, 10, 0.5) for r in range(20)]
    assert all(len(d) == 5 and d == sorted(set(d)) for d in draws)
    assert draws == [sampled(0, r, 10, 0.5) for r in range(20)], "deterministic"
    assert len({tuple(d) for d in draws}) > 10, "another round, another sample"
    assert sampled(1, 0, 10, 0.5) != sampled(0, 0, 10, 0.5) or sampled(1, 1, 10, 0.5) != draws[1]
    # in a separate interpreter too: nothing depends on the process
    code = (
        "from soma.config.participation import sampled; "
        "print([sampled(0, r, 10, 0.5) for r in range(20)])"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(other.stdout) == draws
    assert sampled(0, 3, 10, None) == list(range(10)) == sampled(0, 3, 10, 1.0)
    assert sampled(0, 3, 10, 3) == sorted(sampled(0, 3, 10, 3)) and len(sampled(0, 3, 10, 3)) == 3


@pytest.mark.parametrize(
    ("participation", "count"), [(None, 10), (1, 1), (10, 10), (0.5, 5), (0.25, 3), (0.01, 1)]
)
def test_a_count_or_a_fraction_of_the_clients(participation, count) -> None:
    assert sample_size(participation, 10) == count


@pytest.mark.parametrize(("quorum", "count"), [(None, 9), (0.8, 8), (0.75, 7), (1.0, 9), (4, 4)])
def test_a_quorum_is_a_count_or_a_fraction_of_the_sampled_rounded_up(quorum, count) -> None:
    assert quorum_size(quorum, 9) == count


@pytest.mark.parametrize("bad", [0, 11, 0.0, 1.5, -0.2, True, "half", float("nan")])
def test_a_participation_that_cannot_be_is_refused_by_name(bad) -> None:
    with pytest.raises(ParticipationError, match="participation"):
        sample_size(bad, 10)


def test_the_default_policy_is_everyone_and_all_of_them() -> None:
    assert policy(0, 5, 10) == (None, None)
    expected, quorum = policy(0, 5, 10, 0.5, 0.8)
    assert expected == tuple(sampled(0, 5, 10, 0.5)) and quorum == 4


# --- partial rounds, in the library ---------------------------------------------------------


def test_past_the_deadline_the_round_is_averaged_over_whoever_came_if_they_are_a_quorum(
    tmp_path,
) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 3, quorum=2)
    contribute(store, meeting, weights(0), mine=0, size=1)
    contribute(store, meeting, weights(1), mine=1, size=3)
    started, slept = time.monotonic(), []

    def sleep(seconds: float) -> None:  # an event, not a duration: a loaded machine makes a
        slept.append(seconds)  # round that never waits take 0.3 s all the same
        time.sleep(seconds)

    digest = average_round(store, meeting, deadline=0.3, backoff=QUICK, sleep=sleep, lease=LEASE)
    assert slept, "it polled for client 2 before going on"
    assert time.monotonic() - started >= 0.3, "it waited for client 2 until the deadline"
    record = store.recall_digest(digest)
    assert same(weights_of_average(store, digest), soma.fedavg([weights(0), weights(1)], [1, 3]))
    assert [i["client"] for i in record["inputs"]] == [0, 1]
    assert record["expected"] == [0, 1, 2] and record["quorum"] == 2
    assert record["left_out"] == [{"client": 2, "why": "never came"}]
    # client 2 arrives late: it leaves with the round's average, which stays as it was
    contribute(store, meeting, weights(2), mine=2, size=5)
    assert average_round(store, meeting, deadline=0, lease=LEASE) == digest
    (row,) = status(store, "r")
    assert row["average"] == digest and row["written"] == [0, 1, 2]


def test_below_the_quorum_the_deadline_names_who_is_missing(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 4, quorum=3)
    contribute(store, meeting, weights(0), mine=0)
    contribute(store, meeting, weights(1), mine=1)
    with pytest.raises(RoundIncomplete) as missing:
        average_round(store, meeting, deadline=0.2, backoff=QUICK, lease=LEASE)
    assert missing.value.missing == [2, 3]
    assert "clients 2, 3 never came" in str(missing.value) and "quorum 3 of 4" in str(missing.value)
    assert not [n for n in store.bound() if n.endswith("/claimed")]


@pytest.mark.slow
def test_a_client_that_drops_out_is_not_waited_for_and_the_record_says_why(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 3, quorum=2)
    contribute(store, meeting, weights(0), mine=0)
    contribute(store, meeting, weights(1), mine=1)
    drop(store, meeting, mine=2, why="failed: RuntimeError: out of memory")
    started = time.monotonic()
    digest = average_round(store, meeting, deadline=60, backoff=QUICK, lease=LEASE)
    assert time.monotonic() - started < 10, "everyone was accounted for: no deadline to wait"
    record = store.recall_digest(digest)
    assert record["left_out"] == [{"client": 2, "why": "failed: RuntimeError: out of memory"}]
    shown = subprocess.run(
        [sys.executable, "-m", "soma.cli", "status", "--store", str(tmp_path), "--run", "r"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "2/3 written, 1 dropped out" in shown
    assert "left out client 2: failed: RuntimeError: out of memory" in shown


def test_when_the_drop_outs_leave_fewer_than_the_quorum_everyone_is_told_at_once(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 3, quorum=3)
    contribute(store, meeting, weights(0), mine=0)
    contribute(store, meeting, weights(1), mine=1)
    drop(store, meeting, mine=2, why="refused: NaN")
    started = time.monotonic()
    with pytest.raises(RoundIncomplete, match=r"fewer than the quorum of 3: client 2 refused: NaN"):
        average_round(store, meeting, deadline=60, backoff=QUICK, lease=LEASE)
    assert time.monotonic() - started < 10


def test_only_the_sampled_clients_are_expected_and_sizes_weigh_only_them(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = Meeting("r", 0, 5, expected=(1, 3))
    with pytest.raises(soma.RoundError, match="client 0 does not take part"):
        contribute(store, meeting, weights(0), mine=0)
    contribute(store, meeting, weights(1), mine=1, size=2)
    contribute(store, meeting, weights(3), mine=3, size=6)
    digest = average_round(store, meeting, deadline=5, backoff=QUICK, lease=LEASE)
    assert same(weights_of_average(store, digest), soma.fedavg([weights(1), weights(3)], [2, 6]))
    assert store.recall_digest(digest)["left_out"] == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_an_export_with_nan_or_infinities_is_refused_naming_client_node_and_key(
    tmp_path, bad
) -> None:
    store = Store(tmp_path)
    poisoned = weights(0)
    poisoned["fc"]["bias"][2] = bad
    with pytest.raises(Refused, match=r"client 1: node 'fc' key 'bias' holds 1 value"):
        contribute(store, Meeting("r", 0, 2), poisoned, mine=1)
    assert store.bound() == [], "nothing was written"


def test_sizes_weigh_a_partial_round_by_those_who_took_part_in_threads(tmp_path) -> None:
    """Three of four clients, each in a thread as it would be in a process: the quorum of 3
    is met at the deadline, and all three leave with the same weights."""
    store = Store(tmp_path)
    results: list[dict] = []

    def client(k: int) -> None:
        results.append(
            soma.gather(
                store, weights(k), run="r", round=0, clients=4, mine=k, size=k + 1,
                quorum=3, deadline=0.5, backoff=QUICK,
            )
        )  # fmt: skip

    threads = [threading.Thread(target=client, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and all(same(r, results[0]) for r in results)
    assert same(results[0], soma.fedavg([weights(k) for k in range(3)], [1, 2, 3]))


# --- under `soma client`, real processes --------------------------------------------------------


def soma_client(store: Path, mine: int, *flags: str, clients: int, rounds: int = 2):
    command = [sys.executable, str(HERE / "round_worker.py"), "client", "--store", str(store)]
    command += ["--run", "part", "--rounds", str(rounds), "--clients", str(clients)]
    command += ["--mine", str(mine), *flags]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FIXTURES), *sys.path]))
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def finish(processes: list) -> list[tuple[int, str, str]]:
    return [(p.wait(timeout=300), *p.communicate()) for p in processes]


@pytest.mark.slow
def test_soma_client_trains_only_the_sampled_clients_and_all_leave_with_the_same_weights(
    tmp_path,
) -> None:
    flags = ("--participation", "2", "--option", "examples=32")
    done = finish([soma_client(tmp_path, k, *flags, clients=4) for k in range(4)])
    assert all(code == 0 for code, _, _ in done), [err for _, _, err in done]
    lines = [[json.loads(x) for x in out.splitlines() if '"round"' in x] for _, out, _ in done]
    store = Store(tmp_path)
    for r in range(2):
        chosen = sampled(0, r, 4, 2)
        assert {line[r]["weights"] for line in lines} == {lines[0][r]["weights"]}
        trained = [k for k in range(4) if lines[k][r]["train"] is not None]
        assert trained == chosen, f"round {r}: only the sampled clients trained"
        assert len(trained) == 2, f"round {r}: two of the four took part"
        record = store.recall_digest(lines[0][r]["average"])
        assert [i["client"] for i in record["inputs"]] == chosen
        assert record["expected"] == chosen


@pytest.mark.slow
def test_a_diverging_client_under_soma_client_is_refused_and_the_quorum_goes_on(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("SOMA_STORE_PATIENCE", "30")  # a quorum's deadline outlasts it + grace
    task = ("--task", "diverging", "--option", "examples=32", "--option", "bad_client=1")
    flags = (*task, "--quorum", "2", "--deadline", "60")
    done = finish([soma_client(tmp_path, k, *flags, clients=3, rounds=1) for k in range(3)])
    assert all(code == 0 for code, _, _ in done), [err for _, _, err in done]
    assert "client 1 drops out of round 0" in done[1][2] and "NaN" in done[1][2]
    (row,) = status(Store(tmp_path), "part")
    record = Store(tmp_path).recall_digest(row["average"])
    assert [i["client"] for i in record["inputs"]] == [0, 2]
    (left,) = record["left_out"]
    assert left["client"] == 1 and left["why"].startswith("refused: ")
    assert "node 'fc' key 'weight'" in left["why"] or "key '" in left["why"]
    finals = {json.loads(out.splitlines()[0])["weights"] for _, out, _ in done}
    assert len(finals) == 1, "everyone, the refused client too, leaves with the average"


@pytest.mark.slow
def test_without_a_quorum_a_diverging_client_stops_every_client_with_the_reason(tmp_path) -> None:
    task = ("--task", "diverging", "--option", "examples=32", "--option", "bad_client=1")
    started = time.monotonic()
    done = finish(
        [
            soma_client(tmp_path, k, *task, "--deadline", "120", clients=3, rounds=1)
            for k in range(3)
        ]
    )
    assert time.monotonic() - started < 100, "nobody waited for the deadline"
    for k, (code, _, err) in enumerate(done):
        assert code == 1, err
        said = "client 1 cannot take part" if k == 1 else "fewer than the quorum of 3: client 1"
        assert said in err and "refused" in err and "NaN" in err, err
    assert not [n for n in Store(tmp_path).bound() if n.endswith("/claimed")]
