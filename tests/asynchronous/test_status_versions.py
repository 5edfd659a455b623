"""`soma status` of an asynchronous run reads its records alone (soma.asynchronous.status):
each version as its record says it, with no weights read (a store whose weights are all gone
shows every version the same), every signature checked against a roster (a version rewritten
unsigned is said on its own line, every other still shown), and a version missing below the
latest said where it belongs. Recomputing versions is `soma audit`'s (tests/asynchronous/
test_signed.py); that no torch is imported, tests/cli/test_status_torch_free.py's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from soma.asynchronous import signed
from soma.asynchronous.status import lines, table
from soma.cli import main
from soma.round import layout
from soma.round import signing as signatures
from soma.store import Store

pytest.importorskip("cryptography")

RUN = "a"


@pytest.fixture(scope="module")
def made(keys: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A signed asynchronous run (3 clients, buffer 2, 3 versions, client 0 the averager),
    made once a module; each test reads its own copy."""
    store = tmp_path_factory.mktemp("versions") / "s"
    argv = ["simulate", "--store", str(store), "--run", RUN, "--clients", "3", "--rounds", "3"]
    argv += ["--buffer", "2", "--option", "examples=32", "--roster", str(keys / "roster.json")]
    argv += ["--keys", str(keys / "{client}.key"), "--averagers", "0"]
    assert main(argv) == 0
    return store


@pytest.fixture
def store(made: Path, tmp_path: Path) -> Store:
    shutil.copytree(made, tmp_path / "s")
    return Store(tmp_path / "s")


def roster(keys: Path) -> dict:
    return {"roster": str(keys / "roster.json"), "averagers": [0]}


def test_every_version_is_shown_from_its_record_with_no_weights_read(store, keys) -> None:
    records = [store.recall(signed.version_name(RUN, v)) for v in range(4)]
    updates = [store.recall(n) for n in store.bound(layout.updates(RUN))]
    for digest in {r["weights"] for r in records + updates}:  # every version's and update's
        store.blob_path(digest).unlink()
    for rows in (table(store, RUN), table(store, RUN, **roster(keys))):
        *versions, pending = rows
        assert [row["version"] for row in versions] == [0, 1, 2, 3]
        assert [row["weights"] for row in versions] == [r["weights"] for r in records]
        assert all(not row["problems"] for row in versions), [r["problems"] for r in versions]
        for row, record in zip(versions[1:], records[1:], strict=True):
            assert [e["client"] for e in row["consumed"]] == [
                e["client"] for e in record["consumed"]
            ]
            assert [e["weight"] for e in row["consumed"]] == [
                e["weight"] for e in record["consumed"]
            ]
        assert pending == {"version": None, "pending": pending["pending"], "claimed": None}
        said = lines(rows)
        assert said[0].startswith(f"version    0: weights {records[0]['weights'][:12]}")
        assert all("DOES NOT HOLD" not in line for line in said), said


def test_a_version_rewritten_unsigned_is_said_on_its_line_with_a_roster(store, keys) -> None:
    value = dict(store.recall(signed.version_name(RUN, 2)))
    value.pop(signatures.SIGNED)
    store.bind(signed.version_name(RUN, 2), store.put_value(value))
    as_said = table(store, RUN)  # the store says it, no roster to check against
    assert all(not row.get("problems") for row in as_said)
    rows = table(store, RUN, **roster(keys))
    assert [bool(row.get("problems")) for row in rows] == [False, False, True, False, False]
    (problem,) = rows[2]["problems"]
    assert f"version 2 of asynchronous run {RUN!r}" in problem, problem
    said = lines(rows)
    assert f"DOES NOT HOLD: version 2 of asynchronous run {RUN!r}" in said[2], said[2]
    assert said[3].startswith("version    3: weights ") and "DOES NOT HOLD" not in said[3]


def test_a_version_missing_below_the_latest_is_said_and_the_others_shown(store) -> None:
    store.forget(signed.version_name(RUN, 1))
    rows = table(store, RUN)
    assert [row["version"] for row in rows] == [0, 1, 2, 3, None]
    assert rows[1]["problems"] == ["version 1 is missing below the latest"]
    assert rows[2]["weights"] and not rows[2]["problems"] and rows[3]["consumed"]
    said = lines(rows)
    assert said[1] == "version    1: DOES NOT HOLD: version 1 is missing below the latest"
