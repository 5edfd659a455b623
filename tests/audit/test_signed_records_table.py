"""The rows of docs/how-to/signing.md's table "What was attacked, and what became of it": issue
52's attacks on a signed run's store by a writer holding no roster key, each made on a copy of
a finished run and counted by what `soma audit` said (tests/figures.py's columns: *detected*
is exit 1 naming the round or run; *different* an exit 0, which must stay 0), printed at the
end of the module like the fault figures (`python -m pytest -q -s
tests/audit/test_signed_records_table.py tests/asynchronous/test_signed.py`).

Each attack's own test, with its mutant, is elsewhere (named per row below); this module
counts them on one run so that the table is printed by the tests that attack, and checks that
the table names exactly these rows.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from figures import FIGURES, printed  # noqa: E402
from signed_runs import RUN  # noqa: E402
from test_truncated import (  # noqa: E402
    LAST,
    ROUNDS,
    _audit,
    _copy,
    _forget_round,
    _leave_out,
    _meeting,
    _run,
    clean,  # noqa: F401  (a fixture)
    keys,  # noqa: F401  (a fixture)
)

from soma.round import layout  # noqa: E402
from soma.store import Store  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "signing.md"
ROWS = {  # row: the test that holds it, with its mutant
    "last round deleted": "tests/audit/test_truncated.py (audit_total_not_checked)",
    "round 0 deleted": "tests/audit/test_truncated.py (audit_round_0_not_required)",
    "censored 'never came'": "tests/audit/test_truncated.py (audit_never_came_taken_as_said)",
    "charter planted, run pinned": "tests/round/test_charter_pin.py (charter_pin_not_compared)",
}


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    yield
    printed(request, list(ROWS))


@pytest.fixture(scope="module")
def theirs(tmp_path_factory, keys) -> Path:  # noqa: F811
    """Another store's run of the same name and roster (staging, say), never changed."""
    return _run(keys, tmp_path_factory.mktemp("theirs") / "store")


def attacked(row: str, code: int, capsys) -> str:
    """Count one attack of `row` by the audit's exit code; its one refusal line."""
    err = capsys.readouterr().err.strip()
    FIGURES[row]["trials"] += 1
    FIGURES[row]["faults"] += 1
    FIGURES[row]["detected"] += code == 1 and err.startswith("soma: audit: ")
    FIGURES[row]["different"] += code == 0
    assert code == 1, f"{row}: the audit passed it"
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_the_last_round_deleted(tmp_path, keys, clean, capsys) -> None:  # noqa: F811
    store = _copy(tmp_path, clean)
    _forget_round(store, LAST)
    said = attacked("last round deleted", _audit(store, keys, "--rounds", str(ROUNDS)), capsys)
    assert f"round {LAST} is missing" in said, said


def test_round_0_deleted(tmp_path, keys, clean, capsys) -> None:  # noqa: F811
    store = _copy(tmp_path, clean)
    _forget_round(store, 0)
    said = attacked("round 0 deleted", _audit(store, keys), capsys)
    assert "round 0 is missing" in said, said


def test_a_censored_never_came(tmp_path, keys, clean, capsys) -> None:  # noqa: F811
    store = _copy(tmp_path, clean)
    _leave_out(store, _meeting(store, keys, LAST), 1)
    said = attacked("censored 'never came'", _audit(store, keys), capsys)
    assert "client 1 never came, but client 1's signed record" in said, said


def test_a_charter_planted_from_another_store_when_the_run_pinned_its_own(
    tmp_path,
    keys,  # noqa: F811
    clean,  # noqa: F811
    theirs,
    capsys,
) -> None:
    """Their charter and records in a fresh store; the rightful run's auditor pins its own."""
    mine = Store(clean).resolve(layout.charter(RUN))
    planted = _copy(tmp_path, theirs)
    assert planted.resolve(layout.charter(RUN)) not in (None, mine)
    said = attacked(
        "charter planted, run pinned", _audit(planted, keys, "--charter", str(mine)), capsys
    )
    assert str(mine)[:12] in said, said


def test_the_docs_table_names_every_row_counted_here() -> None:
    """signing.md's table lists each row this module counts (beside those of other modules)."""
    text = DOCS.read_text()
    lines = text[text.index("| attack |") :].splitlines()
    table = [line for line in itertools.takewhile(lambda line: line.startswith("|"), lines)]
    found = [re.split(r"\s*\|\s*", line.strip("| "))[0] for line in table[2:]]
    assert set(ROWS) <= set(found), (sorted(ROWS), found)
