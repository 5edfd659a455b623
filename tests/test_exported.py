"""What a reader writes out as the model (soma.exported: `soma export`, `--best`, the
workflow's model and best jobs): with the roster, never a round or an evaluation a store
writer without a key forged; a run that has a roster is not exported unchecked by accident."""

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
from soma.exported import (  # noqa: E402
    ForgedRound,
    export_best_checked,
    export_checked,
    signed_weights,
)
from soma.model import read_metadata  # noqa: E402
from soma.round import layout  # noqa: E402
from soma.round.readers import UncheckedRun  # noqa: E402


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    make_keys_and_roster(folder)
    return folder


def test_a_fake_last_round_is_refused_naming_it_and_no_file_is_written(tmp_path, keys):
    store = signed_run(tmp_path / "s", keys)
    r, _ = fake_round(store)
    out = tmp_path / "m.safetensors"
    with pytest.raises(
        ForgedRound, match=rf"round {r} of run .*unsigned.*round {r - 1} is the last"
    ):
        export_checked(store, RUN, out, signing=signing_of(keys))
    assert not out.exists()
    made = export_checked(store, RUN, out, signing=signing_of(keys), round=r - 1)
    assert made["round"] == r - 1 and read_metadata(out)["round"] == str(r - 1)


def test_soma_export_refuses_a_signed_run_without_its_roster_unless_told_unchecked(
    tmp_path, keys, capsys
):
    store = signed_run(tmp_path / "s", keys)
    fake_round(store)
    out = tmp_path / "m.safetensors"
    base = ["export", "--store", str(tmp_path / "s"), "--run", RUN, "-o", str(out)]
    for best in ([], ["--best", "--metric", "loss"]):
        assert main(base + best) == 1
        assert "has a roster" in capsys.readouterr().err and not out.exists()
    with pytest.raises(UncheckedRun):
        from soma.exported import reader_signing

        reader_signing(store, RUN, None)
    assert main(base + ["--roster", str(keys / "roster.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("soma: not exported: round 2") and len(err.splitlines()) == 1
    assert not out.exists()
    assert main(base + ["--unchecked"]) == 0, "the user's explicit choice: the store's last round"
    assert main(base + ["--unchecked", "--roster", str(keys / "roster.json")]) == 1


def test_best_ignores_forged_federated_evaluations_naming_them(tmp_path, keys, capsys):
    store = signed_run(tmp_path / "s", keys)
    fake_round(store)
    fake_federated(store, 0)
    out = tmp_path / "best.safetensors"
    made = export_best_checked(store, RUN, out, "loss", signing=signing_of(keys))
    assert made["round"] == 1 and made["best"]["validation"] > -1e9
    assert any("round 0" in why and "federated evaluation record" in why for why in made["ignored"])
    assert any("round 2" in why and "average record" in why for why in made["ignored"])
    unchecked = export_best_checked(store, RUN, tmp_path / "u.safetensors", "loss", signing=None)
    assert unchecked["round"] == 0, "what the forger wanted: why the roster is needed"
    roster = str(keys / "roster.json")
    argv = ["export", "--store", str(tmp_path / "s"), "--run", RUN, "--best", "--metric", "loss"]
    assert main(argv + ["-o", str(out), "--roster", roster]) == 0
    assert "ignored (unsigned/forged): round 0" in capsys.readouterr().err


def test_the_model_job_writes_only_weights_a_signed_average_names(tmp_path, keys):
    store = signed_run(tmp_path / "s", keys)
    r, zeros = fake_round(store)
    signing = signing_of(keys)
    with pytest.raises(ForgedRound, match=rf"round {r} of run .*weights {zeros}.*unsigned"):
        signed_weights(store, signing, RUN, r, zeros)
    real = store.recall(layout.average(meeting_of(store, r - 1)))
    assert signed_weights(store, signing, RUN, r - 1, real["weights"])
    with pytest.raises(ForgedRound, match="no signed average record names them"):
        signed_weights(store, signing, RUN, r - 1, zeros)
