"""soma audit refuses an average whose record claims a kind of round its meeting is not (a
tree or a secure sum in a flat round): what a record says it is never chooses its check."""

from __future__ import annotations

import pytest

pytest.importorskip("cryptography")

from signed_runs import CLIENTS, RUN, make_keys_and_roster  # noqa: E402

from soma.cli import main  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.round.signing import Signing, read_roster  # noqa: E402
from soma.round.verify import meeting_from_about  # noqa: E402
from soma.run.simulate import simulate  # noqa: E402
from soma.store import Store  # noqa: E402

CLAIMS = {
    "tree": {"fan_in": 2, "mean": "0" * 64, "weight": 3.0},
    "secure": {"sum": "0" * 64, "threshold": 2, "error_bound": 0.0},
}


@pytest.mark.parametrize("claim", sorted(CLAIMS))
def test_a_flat_rounds_average_that_claims_another_kind_fails_the_audit(tmp_path, claim, capsys):
    keys = tmp_path / "keys"
    keys.mkdir()
    make_keys_and_roster(keys)
    simulate("soma.tasks.control", clients=CLIENTS, rounds=2, roster=keys / "roster.json",
             keys=str(keys / "{client}.key"), store=tmp_path / "store", deadline=30)  # fmt: skip
    store = Store(tmp_path / "store")
    signing = Signing.of(read_roster(keys / "roster.json"), str(keys / "{client}.key"))
    key = next(n.rsplit("/", 2)[-2] for n in store.bound(f"{RUN}/round/1/") if n.endswith("/about"))
    meeting = meeting_from_about(store, RUN, 1, key, signing)
    value = dict(store.recall(meeting.average))
    value.pop(signatures.SIGNED)
    weights = store.recall_digest(value["weights"])
    garbage = {n: {k: t * 0 + 1e15 for k, t in m.items()} for n, m in weights.items()}
    value.update({"weights": store.put_value(garbage), claim: CLAIMS[claim]})
    store.bind(meeting.average, signatures.put(store, signing, value, name=meeting.average, by=1))
    capsys.readouterr()
    code = main(["audit", "--store", str(tmp_path / "store"), "--run", RUN,
                 "--roster", str(keys / "roster.json")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1, out
    assert f"says {claim} " in out and "round 1" in out, out
    assert "every check held" not in out
