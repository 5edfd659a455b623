"""A run that declared `averagers:` read with its roster and --averagers (issue 50): soma
audit, status and export take its signed rounds, an average signed by a roster member who
is not an averager still fails, and averagers that are not the run's are refused, naming
both rosters' digests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from signed_runs import CLIENTS, RUN  # noqa: E402
from test_audit import BROKEN, _meeting, _replace_the_average  # noqa: E402

from soma.audit import audit  # noqa: E402
from soma.cli import main  # noqa: E402
from soma.config.spec import RunSpec  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.round.signing import Signing, read_roster  # noqa: E402
from soma.run.simulate import simulate_spec  # noqa: E402
from soma.store import Store  # noqa: E402

ROUNDS = 2
AVERAGERS = [0]


@pytest.fixture(scope="module")
def declared(tmp_path_factory, keys) -> Path:
    """A finished signed run whose averages only client 0 may sign, never changed."""
    folder = tmp_path_factory.mktemp("declared") / "store"
    spec = RunSpec(run=RUN, task="soma.tasks.control", clients=CLIENTS, rounds=ROUNDS,
                   mine=tuple(range(CLIENTS)), roster=str(keys / "roster.json"),
                   keys=str(keys / "{client}.key"), averagers=tuple(AVERAGERS))  # fmt: skip
    simulate_spec(spec, folder)
    return folder


def _read(command: str, store: Path, keys: Path | None, *more: str) -> int:
    roster = [] if keys is None else ["--roster", str(keys / "roster.json")]
    return main([command, "--store", str(store), "--run", RUN, *roster, *more])


def test_a_run_that_declared_averagers_audits_clean_with_them(declared, keys, capsys):
    assert _read("audit", declared, keys, "--averagers", "0") == 0
    assert "every check held" in capsys.readouterr().out
    report = audit(Store(declared), RUN, keys / "roster.json", AVERAGERS)
    assert report.clean and all(r.signer == 0 for r in report.rounds)
    # the roster read back from the store, with the averagers the run declared
    assert _read("audit", declared, None, "--averagers", "0") == 0
    assert "every check held" in capsys.readouterr().out
    # without them it is another roster's run, and the refusal says what to give
    assert _read("audit", declared, keys) == 1
    assert "--averagers" in capsys.readouterr().err


def test_status_and_export_read_it_with_them(declared, keys, tmp_path, capsys):
    assert _read("status", declared, keys, "--averagers", "0") == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == ROUNDS, lines
    for line in lines:
        assert "3/3 written; average " in line and "ignored" not in line, line
    model = tmp_path / "model.safetensors"
    assert _read("export", declared, keys, "--averagers", "0", "-o", str(model)) == 0
    assert f"round {ROUNDS - 1} of run" in capsys.readouterr().out and model.is_file()
    best = tmp_path / "best.safetensors"
    more = ("--best", "--metric", "loss", "--averagers", "0", "-o", str(best))
    assert _read("export", declared, keys, *more) == 0
    captured = capsys.readouterr()
    assert "ignored" not in captured.err and best.is_file()


def test_an_average_signed_by_a_member_who_is_no_averager_fails(declared, keys, tmp_path, capsys):
    shutil.copytree(declared, tmp_path / "store", symlinks=True)
    store = Store(tmp_path / "store")
    meeting = _meeting(store, keys, BROKEN, averagers=AVERAGERS)
    _replace_the_average(store, meeting, by=1)
    garbage = store.resolve(meeting.average)
    assert _read("audit", tmp_path / "store", keys, "--averagers", "0") == 1
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"soma: audit: round {BROKEN} of run {RUN!r}: "), line
    assert "client 1" in line and "averagers [0]" in line, line
    assert _read("status", tmp_path / "store", keys, "--averagers", "0") == 1
    out = capsys.readouterr().out
    assert "unsigned/forged, ignored" in out and "not among the run's averagers [0]" in out
    model = tmp_path / "model.safetensors"  # the round's signed average, not client 1's
    assert _read("export", tmp_path / "store", keys, "--averagers", "0", "-o", str(model)) == 0
    out = capsys.readouterr().out
    assert f"round {BROKEN} of run" in out and "average " in out and garbage not in out, out


@pytest.mark.parametrize("command", ["audit", "status", "export"])
def test_averagers_not_the_runs_are_refused_naming_both_rosters(declared, keys, command, capsys):
    output = [] if command != "export" else ["-o", str(declared.parent / "never.safetensors")]
    assert _read(command, declared, keys, "--averagers", "0,1", *output) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    charter = signatures.charter_roster(Store(declared), RUN)
    given = Signing.of(read_roster(keys / "roster.json"), None, [0, 1]).digest
    assert line.startswith("soma: averagers [0, 1]: "), line
    assert charter is not None and charter[:12] in line and given[:12] in line, line
    assert not (declared.parent / "never.safetensors").exists()


@pytest.mark.parametrize("command", ["status", "export"])
def test_averagers_without_a_roster_are_refused(declared, command, tmp_path, capsys):
    output = [] if command != "export" else ["-o", str(tmp_path / "never.safetensors")]
    assert _read(command, declared, None, "--averagers", "0", *output) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("soma: --averagers without --roster"), line
