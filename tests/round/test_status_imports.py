"""Nothing named in the store is ever imported: a record's `strategy` that is not built in is
shown as its name, never imported (soma.strategies.load_strategy(trusted=False)), since
importing a module runs its code and anyone who can write the store can write the name."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
from helpers import soma

from soma.round import layout, status
from soma.run.simulate import simulate
from soma.store import Store, record_json
from soma.strategies import UntrustedStrategy, load_strategy

RUN = "simulation"
MODULE = "soma_test_planted_strategy"


def plant(tmp_path: Path) -> tuple[Path, Path]:
    """A one-round run whose average record names MODULE, a module in tmp_path that leaves a
    file when imported (and would make a strategy); (the store, the file it would leave)."""
    folder = tmp_path / "code"
    folder.mkdir()
    marker = tmp_path / "imported"
    (folder / f"{MODULE}.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from soma.strategies.fedavg import make  # noqa\n"
    )
    simulate("soma.tasks.control", clients=2, rounds=1, deadline=30, store=tmp_path / "s")
    store = Store(tmp_path / "s")
    (name,) = [n for n in store.bound(RUN) if n.endswith("/average")]
    prefix = name.rsplit("/", 1)[0]
    # the meeting as a writer of an unsigned store may make it: its about record consistent
    # with the key it is filed under (status believes nothing else), naming MODULE
    about = {**store.recall(layout.about(prefix)), "strategy": MODULE}
    identity = {k: v for k, v in about.items() if k not in ("run", "round")}
    key = hashlib.sha256(record_json.canonical_json(identity)).hexdigest()
    planted = layout.meeting(RUN, 0, key)
    store.keep(layout.about(planted), about)
    store.keep(layout.average(planted), {**store.recall(name), "strategy": MODULE, "meeting": key})
    for old in store.bound(prefix):
        store.forget(old)
    return tmp_path / "s", marker


def test_status_shows_a_stored_strategy_by_name_and_imports_nothing(tmp_path, monkeypatch):
    path, marker = plant(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    (row,) = status(Store(path), RUN)
    assert row["strategy"] == MODULE and row["average"] and not row["problems"]
    assert row["privacy"] is None
    assert not marker.exists() and MODULE not in sys.modules
    with pytest.raises(UntrustedStrategy, match=f"strategy '{MODULE}' is named by a record"):
        load_strategy(MODULE, trusted=False)
    assert not marker.exists()
    assert load_strategy("fedavg", trusted=False) and load_strategy(
        "soma.strategies.median", {}, trusted=False
    )
    load_strategy(MODULE)  # the local config's (the caller's own) name imports as it always did
    assert marker.exists()


@pytest.mark.slow
def test_a_real_soma_status_imports_nothing_the_store_names(tmp_path):
    path, marker = plant(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "code"), *sys.path])}
    for flags in ([], ["--json"]):
        result = soma("status", "--store", str(path), "--run", RUN, *flags, env=env)
        assert result.returncode == 0, result.stderr
        assert MODULE in result.stdout
        assert not marker.exists(), "soma status imported a module a record named"
