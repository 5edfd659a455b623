"""One process hosting every client (soma.run.simulate): a temporary store that costs nothing
to drop, and no wait on a barrier that this process alone completes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import soma
from soma import files
from soma.run import simulate as simulated

RUN = {"clients": 4, "rounds": 2}


@pytest.fixture
def ram(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder standing for the RAM-backed one, $TMPDIR unset so that it is chosen."""
    folder = tmp_path / "shm"
    folder.mkdir()
    monkeypatch.setattr(simulated, "RAM", folder)
    monkeypatch.delenv("TMPDIR", raising=False)
    return folder


def test_the_temporary_store_goes_to_the_ram_backed_folder_when_it_has_room(ram) -> None:
    assert simulated.temporary_parent(10**6) == str(ram)
    assert simulated.temporary_parent(10**18) is None  # no room: the system's temporary folder


def test_tmpdir_set_says_where_the_temporary_store_goes(ram, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(ram.parent))
    assert simulated.temporary_parent(10**6) is None  # tempfile's: $TMPDIR


def test_no_ram_backed_folder_means_the_system_s_temporary_folder(ram, monkeypatch) -> None:
    monkeypatch.setattr(simulated, "RAM", ram / "absent")
    assert simulated.temporary_parent(10**6) is None


def test_the_store_s_size_is_weighed_by_the_task_s_nodes() -> None:
    from soma.config.spec import RunSpec
    from soma.run.checked import checked

    spec = RunSpec(run="r", task="soma.tasks.digits", clients=10, rounds=50, given="library")
    task, _ = checked(spec)
    weights = sum(p.numel() * 4 for n in task.nodes(0).values() for p in n.parameters())
    assert simulated.needed(spec, task) == 50 * 14 * (weights + simulated.PER_CONTRIBUTION)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every fsync, fdatasync and syncfs made from now on (benchmarks/fsyncs.py's count)."""
    made: list[str] = []

    def counted(kind, real):
        def call(*args):
            made.append(kind)
            return real(*args)

        return call

    monkeypatch.setattr(os, "fsync", counted("fsync", os.fsync))
    monkeypatch.setattr(os, "fdatasync", counted("fdatasync", os.fdatasync))
    if files._SYNCFS is not None:
        monkeypatch.setattr(files, "_SYNCFS", counted("syncfs", files._SYNCFS))
    return made


def test_a_temporary_store_is_scratch_and_removed_at_the_end(ram, monkeypatch) -> None:
    """Nothing of it outlives the process, so nothing is made durable, even when the run says
    durable; the folder was in the RAM-backed one while the run went on, and is gone after."""
    seen: list[list[Path]] = []
    made = _counting(monkeypatch)
    soma.simulate(
        "soma.tasks.control",
        **RUN,
        durability="durable",
        after=lambda *_: seen.append(list(ram.iterdir())),
    )
    assert made == []
    assert len(seen) == 2 and all(len(folders) == 1 for folders in seen), seen
    assert seen[0][0].name.startswith("soma-simulate-")
    assert list(ram.iterdir()) == []


def test_a_given_store_stays_as_durable_as_asked(tmp_path, monkeypatch) -> None:
    """The count above can fail: the same run in a store of its own makes its writes durable."""
    made = _counting(monkeypatch)
    soma.simulate("soma.tasks.control", **RUN, store=tmp_path / "s", durability="durable")
    assert made


def test_a_failed_simulation_removes_its_temporary_store_too(ram) -> None:
    class Stop(Exception):
        pass

    def fail(done, driven) -> None:
        assert list(ram.iterdir())  # the store is there while the run goes on
        raise Stop

    with pytest.raises(Stop):
        soma.simulate("soma.tasks.control", **RUN, after=fail)
    assert list(ram.iterdir()) == []


def _never_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every barrier sleeps for its next delay (soma.timing.Backoff): asking for one fails."""
    from soma.timing import Backoff

    def delays(self):
        raise AssertionError("a barrier waited in a process that hosts every client")
        yield  # pragma: no cover

    monkeypatch.setattr(Backoff, "delays", delays)


@pytest.mark.parametrize(
    "how",
    [{}, {"tree": 2}, {"quorum": 3}, {"participation": 3}, {"secure_aggregation": 3}],
    ids=["plain", "tree", "quorum", "participation", "secure"],
)
def test_a_process_hosting_every_client_never_waits_on_a_barrier(
    tmp_path, monkeypatch, how
) -> None:
    """Every input of each round is this process's own, written before the round is averaged:
    the barrier is complete at its first look, so no delay is ever slept (`soma client` with
    every client `--mine` runs this very loop, soma.run.drive)."""
    _never_waits(monkeypatch)
    done = soma.simulate("soma.tasks.control", **RUN, store=tmp_path / "s", **how)
    assert len(done.rounds) == 2


@pytest.mark.parametrize(
    ("given", "clients", "participation", "evaluated"),
    [
        (None, 10, None, None),  # the round's sample: every client
        (None, 100, None, None),
        (None, 1000, None, 100),  # a sample of 100 evaluates
        (None, 1000, 50, None),  # a sample of 50 is the round's sample
        (None, 1000, 0.5, 100),
        (7, 1000, None, 7),  # what the user says stands
        (1.0, 1000, None, 1.0),
    ],
)
def test_a_simulation_evaluates_a_sample_of_at_most_100_unless_told(
    given, clients, participation, evaluated
) -> None:
    assert simulated.evaluated_by_default(given, clients, participation) == evaluated


def test_a_round_of_120_simulated_clients_is_evaluated_by_100() -> None:
    done = soma.simulate("soma.tasks.control", clients=120, rounds=1, durability="scratch")
    assert done.rounds[0].federated["evaluation"]["loss"]["clients"] == 100
    everyone = soma.simulate(
        "soma.tasks.control", clients=120, rounds=1, durability="scratch",
        evaluate_participation=1.0,
    )  # fmt: skip
    assert everyone.rounds[0].federated["evaluation"]["loss"]["clients"] == 120
    assert everyone.weights == done.weights  # who evaluates changes no bit of the weights


def test_a_process_reads_each_rounds_start_once_for_all_the_clients_it_hosts(
    tmp_path, monkeypatch
) -> None:
    """Every client hosted here trains from the round's start read (and verified) once a
    round (soma.run.step.read_once), not once a client; the weights are the same bits."""
    from soma.store.folder import FolderStore

    read: list[str] = []
    real = FolderStore.recall_digest

    def counted(self, digest, *, lazy=False):
        read.append(digest)
        return real(self, digest, lazy=lazy)

    monkeypatch.setattr(FolderStore, "recall_digest", counted)
    done = soma.simulate("soma.tasks.control", clients=6, rounds=2, store=tmp_path / "s")
    monkeypatch.undo()
    starts = [done.rounds[0].record["start"], done.rounds[0].record["weights"]]
    assert all(read.count(d) < 6 for d in starts)  # not one read a client
    again = soma.simulate("soma.tasks.control", clients=6, rounds=2, store=tmp_path / "t")
    assert again.weights == done.weights
