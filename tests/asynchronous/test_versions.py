"""An asynchronous run's versions in one process (soma.asynchronous): FedAvg's bits when every
client starts every version together, staleness weighed and refused as the settings say, a
dead claimer taken over, the run replayed from its records."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch
from helpers import soma

from soma.arithmetic import recomputed_under
from soma.asynchronous.clients import begin, run_clients, train_from
from soma.asynchronous.clock import Clock, simulate_clock
from soma.asynchronous.exported import export_version
from soma.asynchronous.replay import replay
from soma.asynchronous.versions import TooStale, VersionError, Versions
from soma.config.asynchronous import Buffered
from soma.config.spec import BadArgument, RunSpec
from soma.round import holders, layout
from soma.round.once import Place
from soma.run import checked
from soma.run.simulate import simulate
from soma.store import Store
from soma.store.values import value_digest
from soma.timing import DEADLINE, LEASE, Backoff

QUICK = Backoff(first=0.002, cap=0.02)


def _spec(clients: int, versions: int, **settings) -> RunSpec:
    return RunSpec(
        run="a", task="soma.tasks.control", clients=clients, rounds=versions,
        mine=tuple(range(clients)), given="library", asynchronous=settings,
        task_options={"examples": 64},
    )  # fmt: skip


def test_a_buffer_of_every_client_starting_together_gives_synchronous_fedavgs_bits(
    tmp_path,
) -> None:
    spec = _spec(3, 3, buffer=3)
    task, strategy = checked.checked(spec)
    ran = run_clients(spec, Store(tmp_path), task, strategy)
    synchronous = simulate("soma.tasks.control", clients=3, rounds=3, task_options={"examples": 64})
    assert [ran.versions.record(r + 1)[1]["weights"] for r in range(3)] == [
        r.record["weights"] for r in synchronous.rounds
    ]
    assert all(
        e["staleness"] == 0 for v in (1, 2, 3) for e in ran.versions.record(v)[1]["consumed"]
    )


def _w(value: float) -> dict:
    return {"fc": {"w": torch.full((3,), value), "n": torch.tensor(7)}}


def _versions(store: Store, **settings) -> Versions:
    versions = Versions(store, "a", Buffered(**settings))
    versions.begin(store.put_value(_w(0.0)), deadline=None)
    return versions


def test_a_stale_update_weighs_as_the_settings_say_and_the_step_is_fedbuffs(tmp_path) -> None:
    store = Store(tmp_path)
    versions = _versions(store, buffer=2, a=0.5, server_lr=0.5)
    versions.contribute(0, 0, _w(1.0), 10)
    versions.contribute(1, 0, _w(3.0), 30)
    assert versions.advance(backoff=QUICK, deadline=DEADLINE, lease=LEASE) == 1
    w1 = versions.weights(1)["fc"]["w"]  # 0 + 0.5 * (10 * 1 + 30 * 3) / 40
    assert torch.equal(w1, torch.full((3,), 1.25))
    versions.contribute(2, 0, _w(2.0), 20)  # one version old by now
    versions.contribute(0, 1, _w(5.0), 10)
    assert versions.advance(backoff=QUICK, deadline=DEADLINE, lease=LEASE) == 2
    record = versions.record(2)[1]
    said = [(e["client"], e["from"], e["staleness"], e["weight"]) for e in record["consumed"]]
    assert said == [(0, 1, 0, 1.0), (2, 0, 1, 2**-0.5)]
    change = (10 * (5.0 - 1.25) + 20 * 2**-0.5 * (2.0 - 0.0)) / 30
    assert torch.allclose(versions.weights(2)["fc"]["w"], torch.full((3,), 1.25 + 0.5 * change))
    assert torch.equal(versions.weights(2)["fc"]["n"], torch.tensor(7))  # a count, not averaged
    assert [r.problems for r in replay(store, "a")] == [[], [], []]


def test_too_stale_is_refused_before_it_is_written_or_when_a_version_finds_it(tmp_path) -> None:
    store = Store(tmp_path)
    versions = _versions(store, buffer=1, limit=0, kind="constant")
    versions.contribute(0, 0, _w(1.0), 1)
    versions.contribute(1, 0, _w(2.0), 1)  # fresh when contributed
    # consumes client 0's; client 1's is stale now
    assert versions.advance(backoff=QUICK, deadline=DEADLINE, lease=LEASE) == 1
    with pytest.raises(TooStale, match=r"client 2's update from version 0 .* 1 versions old"):
        versions.contribute(2, 0, _w(9.0), 1)
    assert store.resolve(layout.update("a", 0, 2)) is None
    versions.contribute(0, 1, _w(3.0), 1)
    assert versions.advance(backoff=QUICK, deadline=DEADLINE, lease=LEASE) == 2
    record = versions.record(2)[1]
    assert [e["update"] for e in record["consumed"]] == [layout.update("a", 1, 0)]
    assert [(e["update"], e["staleness"]) for e in record["refused"]] == [
        (layout.update("a", 0, 1), 1)
    ]
    assert all(not r.problems for r in replay(store, "a"))


def test_a_claimer_that_died_mid_version_is_taken_over(tmp_path) -> None:
    store = Store(tmp_path)
    versions = _versions(store, buffer=1)
    versions.contribute(0, 0, _w(1.0), 1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    holder = {**holders.me(), "pid": dead.pid, "pid_start": 1}
    place = Place(layout.version("a", 1))
    assert store.claim(place.claimed, store.put_value(holder))
    assert versions.advance(backoff=QUICK, deadline=30, lease=LEASE) == 1
    assert store.resolve(place.takeover(1)) is not None
    assert all(not r.problems for r in replay(store, "a"))


def test_replay_names_a_version_whose_weights_do_not_recompute(tmp_path) -> None:
    store = Store(tmp_path)
    versions = _versions(store, buffer=1)
    versions.contribute(0, 0, _w(1.0), 1)
    versions.advance(backoff=QUICK, deadline=DEADLINE, lease=LEASE)
    record = dict(versions.record(1)[1], weights=store.put_value(_w(1.5)))
    store.bind(layout.published(layout.version("a", 1)), store.put_value(record))
    problems = replay(store, "a")[1].problems
    assert problems == [
        f"its weights {record['weights']} recompute to {value_digest(_w(1.0))} "
        f"({recomputed_under()})"
    ]
    assert "CPU capability" in problems[0], "where it was recomputed, for whoever doubts it"
    audited = soma("audit", "--store", str(tmp_path), "--run", "a")
    assert audited.returncode == 1
    assert f"soma: audit: round 1 of run 'a': version 1: {problems[0]}" in audited.stderr
    with pytest.raises(VersionError, match="version 1 does not replay from its record"):
        export_version(store, "a", tmp_path / "model.safetensors")


def test_a_client_contributes_once_per_version_and_a_rerun_brings_the_same_bits(tmp_path) -> None:
    store = Store(tmp_path)
    versions = _versions(store, buffer=2)
    name = versions.contribute(0, 0, _w(1.0), 1)
    there = store.resolve(name)
    assert versions.contribute(0, 0, _w(1.0), 1) == name and store.resolve(name) == there
    with pytest.raises(VersionError, match="client 0 already contributed other weights"):
        versions.contribute(0, 0, _w(2.0), 1)
    assert not store.has(value_digest(_w(2.0))), "refused before its weights were written"


def test_another_runs_start_under_the_same_name_is_refused(tmp_path) -> None:
    store = Store(tmp_path)
    _versions(store, buffer=1)
    with pytest.raises(VersionError, match="another run of this name"):
        Versions(store, "a", Buffered(buffer=1)).begin(store.put_value(_w(2.0)), deadline=None)


def test_the_simulated_clock_replays_and_draws_the_same_run_from_its_seed(tmp_path) -> None:
    spec = _spec(5, 12, buffer=2, staleness={"limit": 4}, server_lr=0.8)
    task, strategy = checked.checked(spec)
    runs = []
    for where in ("one", "two"):
        store = Store(tmp_path / where)
        line = simulate_clock(spec, store, task, strategy, Clock(seed=3, sigma=1.0))
        assert line.stopped == "12 versions" and line.times == sorted(line.times)
        assert any(s > 0 for s in sum(line.staleness, []))  # stragglers were stale
        assert all(not r.problems for r in replay(store, "a"))
        runs.append([r.value["weights"] for r in replay(store, "a")])
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    ("settings", "also", "said"),
    [
        ({"buffer": 4}, {}, "buffer 4 is more than the run's 3 clients"),
        ({"buffer": 2}, {"secure": 2}, "cannot be summed securely"),
        ({"buffer": 2}, {"strategy": "dp_fedavg"}, "privacy account rests"),
        ({"buffer": 2}, {"strategy": "fedadam"}, "use strategy fedavg"),
        ({"buffer": 0}, {}, "asynchronous.buffer must be an integer >= 1"),
        ({"buffer": 2, "staleness": {"kind": "hinge"}}, {}, "polynomial or constant"),
    ],
)
def test_what_an_asynchronous_run_cannot_be_is_refused_by_name(settings, also, said) -> None:
    spec = RunSpec(
        run="a", task="soma.tasks.control", clients=3, rounds=2, asynchronous=settings,
        **also,
    )  # fmt: skip
    with pytest.raises(Exception, match=said) as refused:
        spec.check()
    assert "asynchronous" in str(refused.value)


def test_command_line_settings_read_as_the_configs() -> None:
    import argparse

    from soma.cli.parser import parser

    args = parser().parse_args(
        ["client", "--store", "s", "--run", "a", "--rounds", "2", "--clients", "3", "--mine", "0",
         "--buffer", "2", "--staleness", "polynomial:0.25", "--staleness-limit", "4"]
    )  # fmt: skip
    assert isinstance(args, argparse.Namespace)
    assert RunSpec.from_args(args).buffered() == Buffered(2, "polynomial", 0.25, 4, 1.0)
    args.staleness = "polynomial:x"
    with pytest.raises(
        BadArgument, match="--buffer: asynchronous.staleness.a must be a number >= 0"
    ):
        RunSpec.from_args(args).check()


def test_a_version_past_the_runs_rounds_is_never_made_whoever_races(tmp_path) -> None:
    """Two processes (clients 0 and 1, buffer 1, one version asked for) both read version 0
    and train from it; the other contributes and advances while this one's update is pending
    too: version 1 is made once, and no process makes a version 2 of the updates left."""
    store = Store(tmp_path)
    spec = _spec(2, 1, buffer=1)
    mine, theirs = (dataclasses.replace(spec, mine=(k,)) for k in (0, 1))
    task, strategy = checked.checked(mine)
    other, nodes, (hosted,) = begin(theirs, store, task)
    raced = []

    def after(contributed, ran) -> None:  # between this process's contribute and its advance
        if raced:
            return
        _, trained = train_from(theirs, other, task, strategy, nodes, hosted, 0)
        other.contribute(1, 0, trained, hosted.size)
        raced.append(other.advance(backoff=QUICK, deadline=DEADLINE, lease=LEASE))

    ran = run_clients(mine, store, task, strategy, after=after)
    assert raced == [1] and ran.latest == 1 and ran.versions.latest() == 1
    assert store.resolve(layout.published(layout.version("a", 2))) is None
    assert [len(r.value["consumed"]) for r in replay(store, "a")] == [0, 1]
    assert all(not r.problems for r in replay(store, "a"))
