"""A run's charter pinned out of band (issue 52, item 4): the first start logs the digest of
the charter it claims; a run pinned to it (`--charter`, config `charter`) refuses a store that
holds another charter (one planted from another store's run, with its records), naming both
digests, before it writes anything, and claims none where the store holds none; readers
(`soma audit`, `status`, `export`) pinned to it refuse such a store too, and an audit without
a pin says the charter was taken on first use, a check not made."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

import yaml  # noqa: E402
from signed_runs import CLIENTS, RUN, signed_run  # noqa: E402

from soma.cli import main  # noqa: E402
from soma.config.configs import ConfigRefused  # noqa: E402
from soma.config.spec import RunSpec  # noqa: E402
from soma.round import layout  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def theirs(tmp_path_factory, keys) -> Path:
    """Another store's run of the same name and roster (staging, say), never changed."""
    folder = tmp_path_factory.mktemp("theirs") / "store"
    signed_run(folder, keys)
    return folder


@pytest.fixture(scope="module")
def ours(tmp_path_factory, keys) -> Path:
    """The rightful run's store after its first start, never changed: tests copy it."""
    folder = tmp_path_factory.mktemp("ours") / "store"
    assert _simulate(keys, folder) == 0
    return folder


def _simulate(keys: Path, store: Path, *more: str, rounds: int = 1) -> int:
    return main(["simulate", "--store", str(store), "--run", RUN, "--rounds", str(rounds),
                 "--clients", str(CLIENTS), "--roster", str(keys / "roster.json"),
                 "--keys", str(keys / "{client}.key"), "--deadline", "30", *more])  # fmt: skip


def _read(command: str, store: Path, keys: Path, *more: str) -> int:
    roster = ["--roster", str(keys / "roster.json")]
    return main([command, "--store", str(store), "--run", RUN, *roster, *more])


def charter_of(store: Path) -> str:
    found = Store(store).resolve(layout.charter(RUN))
    assert found is not None
    return found


def _planted(tmp_path: Path, theirs: Path, records: bool = True) -> Path:
    """A fresh store where a writer holding no key put their run's charter (one blob, one
    claim) before the rightful run began, and (`records`) every record of that run."""
    source, folder = Store(theirs), tmp_path / "planted"
    target = Store(folder)
    shutil.copytree(source.directory / "blobs", target.directory / "blobs", dirs_exist_ok=True)
    target.claim(layout.charter(RUN), charter_of(theirs))
    for name in source.bound(f"{RUN}/") if records else ():
        target.bind(name, source.resolve(name))
    return folder


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _refusal(capsys) -> str:
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("soma: ") and "Traceback" not in captured.err
    return line


def test_the_first_start_prints_the_digest_to_pin_and_a_resume_does_not(tmp_path, keys, caplog):
    store = tmp_path / "store"
    with caplog.at_level(logging.INFO, logger="soma.round.signing"):
        assert _simulate(keys, store) == 0
    digest = charter_of(store)
    said = [r.getMessage() for r in caplog.records if r.name == "soma.round.signing"]
    assert said == [
        f"charter {digest}: pin it with --charter {digest} (config charter: {digest}) so that "
        f"no other is taken (run {RUN!r}'s charter, claimed now)"
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="soma.round.signing"):
        assert _simulate(keys, store, "--charter", digest) == 0
    assert not [r for r in caplog.records if r.name == "soma.round.signing"], "nothing claimed"


def test_a_planted_charter_is_refused_by_the_pinned_run_and_taken_without_a_pin(
    tmp_path, keys, theirs, ours, capsys
):
    mine, planted = charter_of(ours), _planted(tmp_path, theirs)
    assert charter_of(planted) == charter_of(theirs) != mine
    before = _files(planted)
    assert _simulate(keys, planted, "--charter", mine) == 1
    line = _refusal(capsys)
    assert charter_of(theirs)[:12] in line and mine[:12] in line and "--charter" in line
    assert _files(planted) == before, "nothing written"
    # pinned readers refuse it too, one line naming both digests
    for command in ("audit", "status"):
        assert _read(command, planted, keys, "--charter", mine) == 1, command
        line = _refusal(capsys).split("\n")[-1]
        assert charter_of(theirs)[:12] in line and mine[:12] in line, command
    out = tmp_path / "model.safetensors"
    assert _read("export", planted, keys, "--charter", mine, "-o", str(out)) == 1
    assert mine[:12] in _refusal(capsys) and not out.exists()
    # without the pin, their records verify here: the audit holds, and says what it took
    assert _read("audit", planted, keys) == 0
    said = capsys.readouterr().out.splitlines()
    assert (
        f"    --   charter (the run): charter {charter_of(theirs)[:12]}: taken on first use; "
        "pin it (--charter) to refuse a planted one" in said
    )
    assert _files(planted) == before, "nothing written by the readers"


def test_an_audit_pinned_to_another_charter_fails_naming_both(theirs, ours, keys, capsys):
    mine = charter_of(ours)
    assert _read("audit", theirs, keys, "--charter", mine) == 1
    out, theirs_is = capsys.readouterr(), charter_of(theirs)[:12]
    assert f"    FAIL charter: run {RUN!r}'s charter in this store is {theirs_is}" in out.out
    (line,) = out.err.strip().splitlines()
    assert line.startswith(f"soma: audit: run {RUN!r}: ") and mine[:12] in line
    assert theirs_is in line
    assert _read("audit", theirs, keys, "--charter", charter_of(theirs)) == 0  # its own


def test_a_pinned_resume_of_the_run_works_and_its_readers_hold(tmp_path, keys, ours, capsys):
    store = tmp_path / "store"
    shutil.copytree(ours, store, symlinks=True)
    mine = charter_of(store)
    assert _simulate(keys, store, "--charter", mine, rounds=2) == 0
    assert charter_of(store) == mine
    capsys.readouterr()
    assert _read("audit", store, keys, "--charter", mine, "--rounds", "2") == 0
    out = capsys.readouterr().out
    assert f"    ok   charter: {mine}, the one pinned (--charter)" in out.splitlines()
    assert "taken on first use" not in out
    assert _read("status", store, keys, "--charter", mine) == 0
    model = tmp_path / "model.safetensors"
    assert _read("export", store, keys, "--charter", mine, "-o", str(model)) == 0
    assert model.exists()


def test_a_pinned_start_where_the_store_holds_no_charter_claims_none(tmp_path, keys, ours, capsys):
    mine, store = charter_of(ours), tmp_path / "fresh"
    assert _simulate(keys, store, "--charter", mine) == 1
    line = _refusal(capsys)
    assert "holds no charter" in line and mine[:12] in line
    assert "start the run without a pin first" in line
    assert not store.exists(), "no store made"
    Store(store).claim("elsewhere/start", Store(store).put_value({"an": "other run"}))
    assert _simulate(keys, store, "--charter", mine) == 1  # a store that holds none of it
    assert "holds no charter" in _refusal(capsys)
    assert Store(store).bound(f"{RUN}/") == [], "nothing claimed, nothing written"


def test_a_pinned_signing_refuses_a_record_under_another_charter(tmp_path, keys, theirs, ours):
    """Every signed read of a pinned process compares the charter, not only its start."""
    planted = Store(_planted(tmp_path, theirs))
    name = layout.charter(RUN)
    roster = signatures.read_roster(keys / "roster.json")
    (average,) = [n for n in planted.bound(f"{RUN}/") if n.endswith("/average")][-1:]
    reader = signatures.Signing.of(roster, None)
    assert signatures.check_average(planted, reader, planted.resolve(average), name=average,
                                    what="the average") is not None  # fmt: skip
    pinned = signatures.Signing.of(roster, None, charter=charter_of(ours))
    with pytest.raises(signatures.SigningError, match=charter_of(ours)[:12]):
        signatures.check_average(Store(planted.directory), pinned, planted.resolve(average),
                                 name=average, what="the average")  # fmt: skip
    assert planted.resolve(name) == charter_of(theirs)


def test_the_config_key_pins_the_workflows_run(tmp_path, keys, theirs, ours):
    """`charter:` flows from the config to every job's spec (RunSpec.from_config), checked at
    parse time (check_charter_at) and by the schema; refused without a roster or malformed."""
    from snakemake.utils import validate

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config.update(run=RUN, task="soma.tasks.control", clients=CLIENTS,
                  roster=str(keys / "roster.json"), keys=str(keys / "{client}.key"),
                  charter=charter_of(ours))  # fmt: skip
    validate(dict(config), str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    spec = RunSpec.from_config(config).check()
    assert spec.charter == charter_of(ours) and spec.signing.charter == charter_of(ours)
    spec.check_charter_at(ours)  # its own store
    with pytest.raises(ConfigRefused) as refused:
        spec.check_charter_at(_planted(tmp_path, theirs, records=False))
    message = str(refused.value)
    assert message.startswith("config key `charter`: ")
    assert charter_of(theirs)[:12] in message and charter_of(ours)[:12] in message
    with pytest.raises(ConfigRefused, match="holds no charter"):
        spec.check_charter_at(tmp_path / "not yet made")
    with pytest.raises(ConfigRefused, match="`charter` given without a roster"):
        RunSpec.from_config({**config, "roster": None, "keys": None}).check()
    with pytest.raises(ConfigRefused, match="config key `charter`.*64 hex digits"):
        RunSpec.from_config({**config, "charter": charter_of(ours)[:12]}).check()
    with pytest.raises(Exception, match="does not match"):
        validate({**config, "charter": "abc"}, str(ROOT / "workflow" / "schemas" /
                 "config.schema.yaml"))  # fmt: skip


def test_a_charter_without_a_roster_or_not_a_digest_is_refused_on_the_command_line(
    tmp_path, ours, capsys
):
    store = str(ours)
    assert main(["status", "--store", store, "--run", RUN, "--charter", charter_of(ours)]) == 1
    assert "--charter without --roster" in _refusal(capsys)
    assert main(["audit", "--store", store, "--run", RUN, "--charter", "abc"]) == 1
    assert "64 hex digits" in _refusal(capsys)
    assert main(["simulate", "--rounds", "1", "--clients", "2", "--charter", "0" * 64]) == 1
    assert "--charter given without a roster" in _refusal(capsys)
