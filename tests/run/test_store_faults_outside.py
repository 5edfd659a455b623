"""A store that fails outside a client's train step (the run's start, a round's announcement,
its average, an evaluation record, the round's `federated`) is one `soma: ...` line naming
the clients, the round and the store (soma.run.step.store_work), never a traceback; the
task's own error in its evaluation stays the task's (issue 52)."""

from __future__ import annotations

import errno

import pytest

from soma.store.folder import FolderStore

FULL = OSError(errno.ENOSPC, "No space left on device")


def simulate(store, *extra: str) -> int:
    from soma.cli import main

    args = ["simulate", "--store", str(store), "--task", "soma.tasks.control", "--rounds", "1"]
    return main([*args, "--clients", "2", "--option", "examples=16", *extra])


def one_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("soma: "), err
    return lines[0]


def test_a_full_disk_at_an_evaluation_record_is_one_line_naming_client_round_and_store(
    tmp_path, monkeypatch, capsys
) -> None:
    real = FolderStore.put_value

    def put_value(self, value):
        if isinstance(value, dict) and set(value) == {"client", "weights", "metrics", "size"}:
            raise FULL
        return real(self, value)

    monkeypatch.setattr(FolderStore, "put_value", put_value)
    assert simulate(tmp_path / "store") == 1
    said = one_line(capsys)
    assert said.startswith("soma: client 0 cannot go on in round 0 of run 'simulation': "), said
    assert f"the store Store('{tmp_path / 'store'}') failed" in said, said
    assert "evaluation record" in said and "No space left on device" in said, said


@pytest.mark.parametrize(
    "where, doing",
    [
        ("/starts/", "in run 'simulation': the store"),  # the run's start
        ("/about", "in round 0 of run 'simulation': the store"),  # the round's announcement
        ("/average", "in round 0 of run 'simulation': the store"),  # its average
        ("/federated", "round's federated evaluation"),  # the round's evaluation over clients
    ],
)
def test_a_full_disk_at_any_name_outside_the_step_is_one_line(
    tmp_path, monkeypatch, capsys, where, doing
) -> None:
    real_claim, real_bind = FolderStore.claim, FolderStore.bind

    def claim(self, name, digest, *, at_commit=False):
        if where in name:
            raise FULL
        return real_claim(self, name, digest, at_commit=at_commit)

    def bind(self, name, digest):
        if where in name:
            raise FULL
        return real_bind(self, name, digest)

    monkeypatch.setattr(FolderStore, "claim", claim)
    monkeypatch.setattr(FolderStore, "bind", bind)
    assert simulate(tmp_path / "store") == 1
    said = one_line(capsys)
    assert said.startswith("soma: clients 0, 1 cannot go on "), said
    assert doing in said and "No space left on device" in said, said
    assert f"Store('{tmp_path / 'store'}')" in said, said


def test_the_task_s_own_os_error_in_its_evaluation_is_not_called_the_store_s(
    tmp_path, monkeypatch
) -> None:
    from soma.tasks.control import ControlTask

    def evaluate_local(self, nodes, client, clients):
        raise FileNotFoundError(errno.ENOENT, "its held-out file is gone", "held.npy")

    monkeypatch.setattr(ControlTask, "evaluate_local", evaluate_local)
    with pytest.raises(FileNotFoundError, match="held-out file"):
        simulate(tmp_path / "store")
