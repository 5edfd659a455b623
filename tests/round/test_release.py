"""A distributed-DP release lands once per client and round (soma.round.client: claimed in
the store before any of it is written), and a restarted client goes on from it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import TESTS, communicated

from soma.round import Meeting, contribute
from soma.round.client import release_name
from soma.store import Store
from soma.store.values import value_digest
from soma.strategies import load_strategy

torch.set_num_threads(1)

DP = {"clip": 0.5, "noise_multiplier": 1.0, "mode": "distributed", "clients_per_round": 2}


def noisy_release(seed: int) -> dict:
    """What a distributed DP-FedAvg client releases: its clipped update plus its own share of
    the noise, drawn afresh by each attempt."""
    strategy = load_strategy("dp_fedavg", DP)
    start = {"fc": {"weight": torch.zeros(64)}}
    trained = {"fc": {"weight": torch.full((64,), 0.01)}}
    return strategy.local(start=start, state=None, mine=None).release(trained, start, seed=seed)


class Interleaved(Store):
    """One attempt's view of the store folder: its first look at the client's release waits
    until the other attempt has looked too, so that both find none there and go on."""

    watched: str
    met: threading.Barrier
    looked = False

    def resolve(self, name: str) -> str | None:
        found = super().resolve(name)
        if name == self.watched and not self.looked:
            self.looked = True
            self.met.wait(timeout=120)
        return found


def test_two_racing_attempts_release_once_and_both_leave_with_that_release(tmp_path) -> None:
    meeting = Meeting("dp", 0, 2, strategy="dp_fedavg", options=DP)
    exports = [noisy_release(1), noisy_release(2)]
    digests = [value_digest(e) for e in exports]
    assert digests[0] != digests[1]
    met = threading.Barrier(2)
    made: dict[int, object] = {}
    errors: list[BaseException] = []

    def attempt(k: int) -> None:
        try:
            store = Interleaved(tmp_path)
            store.watched, store.met = release_name(meeting, 0), met
            made[k] = contribute(store, meeting, exports[k], mine=0, size=10, release=True)
        except BaseException as error:  # noqa: BLE001  (said below, with the other's)
            errors.append(error)
            met.abort()

    threads = [threading.Thread(target=attempt, args=(k,)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    store = Store(tmp_path)
    landed = [d for d in digests if store.has(d)]
    assert len(landed) == 1, "both attempts' noisy releases reached the store"
    assert made[0].weights == made[1].weights == landed[0], "they left with other weights"
    assert made[0].record == made[1].record == store.resolve(meeting.client(0))
    assert store.resolve(release_name(meeting, 0)) == made[0].record


def test_a_second_attempt_after_the_release_contributes_it_and_writes_no_noise(tmp_path) -> None:
    store = Store(tmp_path)
    meeting = Meeting("dp", 0, 2, strategy="dp_fedavg", options=DP)
    first = contribute(store, meeting, noisy_release(1), mine=0, size=10, release=True)
    rerun = noisy_release(2)
    again = contribute(store, meeting, rerun, mine=0, size=10, release=True)
    assert (again.record, again.weights) == (first.record, first.weights)
    assert not store.has(value_digest(rerun)), "the rerun's noisy release reached the store"


class Counting:
    """A task whose trainings are counted (everything else is the task's own)."""

    def __init__(self, task: object) -> None:
        self.task, self.trained = task, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.task, name)

    def train(self, nodes, data, *, seed, **given):  # noqa: ANN001, ANN201
        self.trained += 1
        return self.task.train(nodes, data, seed=seed, **given)


def test_a_restarted_client_goes_on_from_its_release_without_training(tmp_path) -> None:
    """The client's step (soma.run.step.plain) again in a round it released: no training, no
    noise drawn (private noise would differ), the release it wrote is its contribution."""
    from soma.nodes import export
    from soma.run.step import Hosted, plain
    from soma.tasks import load_task

    store = Store(tmp_path)
    task = Counting(load_task("soma.tasks.control", {"examples": 32}))
    strategy = load_strategy("dp_fedavg", DP)
    start = store.put_value(export(task.nodes(0)))
    meeting = Meeting("dp", 0, 2, start=start, strategy="dp_fedavg", options=DP, config={"seed": 0})
    data = task.shard(0, 2)
    first = plain(store, meeting, task, strategy, task.nodes(0), Hosted(0, data, task.size(data)))
    assert task.trained == 1 and first.contribution is not None
    again = plain(store, meeting, task, strategy, task.nodes(0), Hosted(0, data, task.size(data)))
    assert task.trained == 1, "the restarted client trained (and drew noise) again"
    assert again.contribution == first.contribution and again.dropped is None


# --- a distributed-DP run killed and started again --------------------------------------------

RUN = "dpkill"


REPRODUCIBLE = ("noise=reproducible_not_private", "seed=7")


def client_command(folder: Path, noise: tuple[str, ...]) -> list[str]:
    """`soma client` hosting the 3 clients of a small distributed-DP run (with the test's
    mutant, if any: tests/round_worker.py); `noise`: its noise options (none: private)."""
    command = [sys.executable, str(TESTS / "round_worker.py"), "client", "--store", str(folder)]
    command += ["--run", RUN, "--rounds", "3", "--clients", "3", "--mine", "0-2"]
    command += ["--deadline", "120", "--evaluate", "none", "--option", "examples=32"]
    command += ["--strategy", "dp_fedavg"]
    dp = ("mode=distributed", "clients_per_round=3", "noise_multiplier=0.5", "clip=0.5")
    for option in (*dp, *noise):
        command += ["--strategy-option", option]
    return command


def finished(folder: Path, noise: tuple[str, ...]) -> list[dict]:
    """`soma client` run to its end (exit 0): the JSON lines that say a round."""
    process = subprocess.Popen(
        client_command(folder, noise), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ((out, err),) = communicated([process], 300)
    assert process.returncode == 0, err[-3000:]
    return [line for line in map(json.loads, out.splitlines()) if "round" in line]


def round_one_record(store: Store) -> str | None:
    """A name of a client's record in round 1 of the run (written after its release), once
    one is bound."""
    for name in store.bound(f"{RUN}/round/1/"):
        if "/client/" in name:
            return name
    return None


def killed_in_round_one(folder: Path, noise: tuple[str, ...]) -> str:
    """`soma client` killed (SIGKILL) once a client's release of round 1 is in the store;
    the digest of round 0's average, which it left."""
    process = subprocess.Popen(
        client_command(folder, noise), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        store = Store(folder)
        while round_one_record(store) is None and process.poll() is None:
            time.sleep(0.01)  # waiting for the event: a release of round 1 in the store
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        _, err = process.communicate()
    assert process.returncode == -signal.SIGKILL, err[-3000:]
    (average,) = [n for n in Store(folder).bound(f"{RUN}/round/0/") if n.endswith("/average")]
    return Store(folder).resolve(average)


@pytest.mark.slow
def test_a_killed_distributed_dp_client_goes_on_from_its_releases(tmp_path) -> None:
    """Private noise: `soma client` killed once a release of round 1 is in the store, and
    started again on the same store and run, goes on from every release it wrote instead of
    training again (fresh noise would be refused as a contradiction) and ends (exit 0)."""
    round_zero = killed_in_round_one(tmp_path, ())
    again = finished(tmp_path, ())
    assert [line["round"] for line in again] == [0, 1, 2]
    assert again[0]["average"] == round_zero


@pytest.mark.slow
def test_a_killed_reproducible_distributed_dp_run_ends_where_a_whole_one_does(tmp_path) -> None:
    """Noise seeded (reproducible_not_private): killed in round 1 and started again, the run
    ends with the weights of the same run never interrupted."""
    whole = finished(tmp_path / "whole", REPRODUCIBLE)
    killed_in_round_one(tmp_path / "killed", REPRODUCIBLE)
    again = finished(tmp_path / "killed", REPRODUCIBLE)
    assert [line["round"] for line in again] == [0, 1, 2]
    ends = [Store(tmp_path / "whole").recall_digest(whole[-1]["weights"])]
    ends.append(Store(tmp_path / "killed").recall_digest(again[-1]["weights"]))
    for node in ends[0]:
        for key in ends[0][node]:
            torch.testing.assert_close(ends[1][node][key], ends[0][node][key])
