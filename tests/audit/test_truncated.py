"""soma audit is not fooled by deletion or censorship (issue 52): a run whose last rounds are
gone fails against the rounds the reader says it was configured for (--rounds: the run signs
its total nowhere), one whose round 0 is gone fails whatever is given, and an average that
says a client never came while that client's record is bound fails where the round could not
have gone on without it, or where the clients' own signed times put its record before the
average. What could not be checked is listed with the verdict."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from signed_runs import CLIENTS, RUN, make_keys_and_roster  # noqa: E402
from test_audit import _meeting  # noqa: E402

from soma.audit import audit  # noqa: E402
from soma.cli import main  # noqa: E402
from soma.health.rebuild import recompute_average  # noqa: E402
from soma.round import Meeting, layout  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.run.simulate import simulate  # noqa: E402
from soma.store import Store  # noqa: E402

ROUNDS = 3
LAST = ROUNDS - 1


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    make_keys_and_roster(folder)
    return folder


def _run(keys: Path, store: Path, **more) -> Path:
    simulate("soma.tasks.control", clients=CLIENTS, rounds=ROUNDS, roster=keys / "roster.json",
             keys=str(keys / "{client}.key"), store=store, deadline=30, **more)  # fmt: skip
    return store


@pytest.fixture(scope="module")
def clean(tmp_path_factory, keys) -> Path:
    """A finished signed run (no quorum: every member must come), never changed."""
    return _run(keys, tmp_path_factory.mktemp("clean") / "store")


@pytest.fixture(scope="module")
def quorum(tmp_path_factory, keys) -> Path:
    """A finished signed run under a quorum of 2 of its 3 clients, never changed."""
    return _run(keys, tmp_path_factory.mktemp("quorum") / "store", quorum=2)


def _copy(tmp_path: Path, folder: Path) -> Store:
    shutil.copytree(folder, tmp_path / "store", symlinks=True)
    return Store(tmp_path / "store")


def _audit(store: Store, keys: Path, *more: str) -> int:
    roster = ["--roster", str(keys / "roster.json")]
    return main(["audit", "--store", str(store.directory), "--run", RUN, *roster, *more])


def _forget_round(store: Store, r: int) -> None:
    """Every name of round `r` unbound, as a store writer deleting it would."""
    names = store.bound(layout.round_prefix(RUN, r) + "/")
    assert names
    for name in names:
        store.forget(name)


def _refusal(capsys) -> str:
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err
    return line


def _leave_out(store: Store, meeting: Meeting, k: int, why: str = "never came") -> None:
    """A roster member (client 0) signs the round's average again without client k's input,
    saying it `why`: the average of the others, recomputed, so it holds as an average."""
    value = dict(store.recall(meeting.average))
    value.pop(signatures.SIGNED)
    value["inputs"] = [i for i in value["inputs"] if i["client"] != k]
    value["left_out"] = [{"client": k, "why": why}]
    value["weights"], value["state"] = recompute_average(store, value)
    store.bind(
        meeting.average, signatures.put(store, meeting.signing, value, name=meeting.average, by=0)
    )


# --- the rounds the store holds ----------------------------------------------------------------


def test_a_clean_run_holds_against_its_rounds_and_says_what_it_could_not_check(
    tmp_path, keys, clean, capsys
):
    store = _copy(tmp_path, clean)
    assert _audit(store, keys, "--rounds", str(ROUNDS)) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        f"    ok   rounds: the run was configured for {ROUNDS} rounds (--rounds {ROUNDS}): "
        f"{ROUNDS} rounds averaged (0..{LAST})" in out
    )
    assert out[-1].startswith("every check held (2 could not be made, listed above): the model")
    charter = (
        f"    --   charter (the run): charter {store.resolve(layout.charter(RUN))[:12]}: taken "
        "on first use; pin it (--charter) to refuse a planted one"
    )
    assert out[-4:-1] == [
        "could not be made (2 checks, marked --):",
        charter,
        f"    --   chain (round 0): the run's first round starts from {_start(store)[:12]}",
    ]
    # without --rounds the count is said, and listed with the verdict as not checked
    assert _audit(store, keys) == 0
    out = capsys.readouterr().out.splitlines()
    unchecked = (
        f"    --   rounds (the run): {ROUNDS} rounds averaged (0..{LAST}); the configured total "
        "was not checked: the run signs it nowhere (give --rounds N)"
    )
    assert out[-5:-1] == ["could not be made (3 checks, marked --):", charter, unchecked, out[-2]]
    assert out[-1].startswith("every check held (3 could not be made, listed above): the model")


def _start(store: Store) -> str:
    """The weights round 0 starts from, as its meeting's identity names them."""
    (key,) = [k for r, k in layout.meetings(store.bound(layout.rounds(RUN)), RUN) if r == 0]
    return store.recall(layout.about(layout.meeting(RUN, 0, key)))["start"]


@pytest.mark.parametrize(
    "given, named",
    [
        (ROUNDS + 1, f"round {ROUNDS} is missing from the store (deleted, or never made)"),
        (ROUNDS - 1, f"the store holds round {LAST} beyond them"),
    ],
)
def test_rounds_other_than_given_fail(tmp_path, keys, clean, capsys, given, named):
    store = _copy(tmp_path, clean)
    assert _audit(store, keys, "--rounds", str(given)) == 1
    assert _refusal(capsys) == (
        f"soma: audit: run {RUN!r}: the run was configured for {given} rounds (--rounds "
        f"{given}); {named}"
    )


def test_every_name_of_the_last_round_forgotten_fails_against_the_rounds(
    tmp_path, keys, clean, capsys
):
    store = _copy(tmp_path, clean)
    _forget_round(store, LAST)
    assert _audit(store, keys, "--rounds", str(ROUNDS)) == 1
    assert _refusal(capsys) == (
        f"soma: audit: run {RUN!r}: the run was configured for {ROUNDS} rounds (--rounds "
        f"{ROUNDS}); round {LAST} is missing from the store (deleted, or never made)"
    )
    # without --rounds it reads as a shorter run, and the verdict says the total went unchecked
    assert _audit(store, keys) == 0
    out = capsys.readouterr().out
    assert f"--   rounds (the run): {LAST} rounds averaged (0..{LAST - 1}); the configured " in out


def test_round_0_forgotten_fails_and_round_1_is_not_taken_as_the_first(
    tmp_path, keys, clean, capsys
):
    store = _copy(tmp_path, clean)
    _forget_round(store, 0)
    assert _audit(store, keys) == 1
    assert _refusal(capsys) == (
        f"soma: audit: run {RUN!r}: round 0 is missing: the run's first rounds were deleted "
        "or never made (the first round in the store is 1)"
    )
    report = audit(store, RUN, keys / "roster.json")
    assert [r.round for r in report.rounds] == list(range(1, ROUNDS))
    (chain,) = [f for f in report.rounds[0].findings if f.check == "chain"]
    assert chain.ok is False, chain
    assert chain.detail.startswith("round 0 is missing from the store (deleted, or never made)")
    assert [f.ok for f in report.findings if f.check == "rounds"] == [False, None]


# --- a client left out as never having come ---------------------------------------------------


def test_never_came_while_its_record_is_bound_in_a_round_that_needed_it_fails(
    tmp_path, keys, clean, capsys
):
    store = _copy(tmp_path, clean)
    meeting = _meeting(store, keys, LAST)
    record = store.resolve(meeting.client(1))
    _leave_out(store, meeting, 1)
    assert _audit(store, keys) == 1
    assert _refusal(capsys) == (
        f"soma: audit: round {LAST} of run {RUN!r}: the average says client 1 never came, but "
        f"client 1's signed record {record[:12]} is bound in the round, and the round needed "
        "all its 3 members (no quorum): it was never averaged without client 1"
    )


def test_an_average_below_its_quorum_fails(tmp_path, keys, clean, capsys):
    store = _copy(tmp_path, clean)
    meeting = _meeting(store, keys, LAST)
    _leave_out(store, meeting, 1)
    store.forget(meeting.client(1))  # and nothing of client 1 is left to contradict it
    assert _audit(store, keys) == 1
    assert _refusal(capsys) == (
        f"soma: audit: round {LAST} of run {RUN!r}: the average took 2 inputs (clients [0, 2]), "
        "and the round needs all its 3 members (the run set no quorum): no averaging goes on "
        "below it"
    )


def test_never_came_under_a_quorum_fails_only_where_the_signed_times_order_it(
    tmp_path, keys, quorum, capsys
):
    """Under a quorum a client that comes after the average is bound there, and the average
    honestly says it never came: only its record's own signed time, well before an input's,
    tells it was left out."""
    store = _copy(tmp_path, quorum)
    assert _audit(store, keys, "--rounds", str(ROUNDS)) == 0
    capsys.readouterr()
    meeting = _meeting(store, keys, LAST)
    record = store.resolve(meeting.client(1))
    _leave_out(store, meeting, 1)
    assert _audit(store, keys, "--rounds", str(ROUNDS)) == 0
    out = capsys.readouterr().out
    said = f"the average says client 1 never came, but client 1's signed record {record[:12]} is"
    assert f"    --   left-out (round {LAST}): {said} bound in the round (written at " in out
    assert "so this could not be checked" in out
    # client 1 wrote its record an hour before the others wrote theirs
    name = meeting.client(1)
    value = dict(store.recall(name))
    value.pop(signatures.SIGNED)
    when = datetime.datetime.fromisoformat(value["by"]["when"]) - datetime.timedelta(hours=1)
    value["by"] = {**value["by"], "when": when.isoformat(timespec="seconds")}
    early = signatures.put(store, meeting.signing, value, name=name, by=1)
    store.bind(name, early)
    assert _audit(store, keys, "--rounds", str(ROUNDS)) == 1
    line = _refusal(capsys)
    assert line.startswith(
        f"soma: audit: round {LAST} of run {RUN!r}: the average says client 1 never came, but "
        f"client 1's signed record {early[:12]} is bound in the round, written at "
        f"{when.isoformat()}, 60 minutes before client "
    ), line
    assert line.endswith("; each by its client's clock, signed): it was there before the average")
