"""`soma status` of a signed run (soma.round.report, soma.round.readers): with the roster,
a round, an average or an evaluation a store writer without a key forged is labelled and
nothing it says is shown; without it, every line says the signatures were not checked."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from signed_runs import (  # noqa: E402
    RUN,
    fake_federated,
    fake_round,
    make_keys_and_roster,
    meeting_of,
    signed_run,
    signing_of,
)

from soma.cli import main  # noqa: E402
from soma.round import layout, status  # noqa: E402


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    make_keys_and_roster(folder)
    return folder


def test_a_fake_unsigned_round_is_labelled_and_nothing_it_says_is_shown(tmp_path, keys, capsys):
    store = signed_run(tmp_path / "s", keys)
    r, zeros = fake_round(store)
    rows = {row["round"]: row for row in status(store, RUN, signing=signing_of(keys))}
    fake = rows[r]
    assert fake["average"] is None and fake["weights"] is None and fake["privacy"] is None
    (ignored,) = fake["ignored"]
    assert f"round {r} of run {RUN!r}" in ignored["why"] and "unsigned" in ignored["why"]
    assert all(rows[x]["average"] and not rows[x]["ignored"] for x in range(r))
    assert {row["signatures"] for row in rows.values()} == {"checked"}

    roster = str(keys / "roster.json")
    assert main(["status", "--store", str(tmp_path / "s"), "--run", RUN, "--roster", roster]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "unsigned/forged, ignored" in lines[r] and "not averaged" in lines[r]
    assert "ignored" not in "".join(lines[:r])


def test_without_the_roster_a_signed_run_says_its_signatures_were_not_checked(
    tmp_path, keys, capsys
):
    store = signed_run(tmp_path / "s", keys)
    fake_round(store)
    rows = status(store, RUN)
    assert {row["signatures"] for row in rows} == {"not checked"}
    assert main(["status", "--store", str(tmp_path / "s"), "--run", RUN]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all("signatures not checked: pass --roster" in x for x in lines)


def test_an_unsigned_run_says_nothing_of_signatures(tmp_path):
    from soma.run.simulate import simulate

    simulate("soma.tasks.control", clients=2, rounds=1, deadline=30, store=tmp_path / "s")
    from soma.store import Store

    assert [row["signatures"] for row in status(Store(tmp_path / "s"), RUN)] == [None]


def test_a_forged_federated_evaluation_and_client_record_are_ignored(tmp_path, keys):
    store = signed_run(tmp_path / "s", keys)
    fake_federated(store, 0)
    prefix = meeting_of(store, 1)
    client = store.recall(layout.client(prefix, 1, 3))
    store.keep(layout.client(prefix, 1, 3), {k: v for k, v in client.items() if k != "signed"})
    rows = {row["round"]: row for row in status(store, RUN, signing=signing_of(keys))}
    assert rows[0]["federated"] is None
    assert "federated evaluation record" in rows[0]["ignored"][0]["why"]
    assert rows[1]["written"] == [0, 2] and rows[1]["missing"] == [1]
    assert "client 1's record" in rows[1]["ignored"][0]["why"]
    assert rows[1]["federated"] is not None, "the round's own records still shown"
