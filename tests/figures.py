"""The reliability figures: what the fault tests injected and what became of it, one row a
kind of fault, printed at the end of each module that counts them (`figures_printed`), e.g.
`python -m pytest -q tests/run/test_reliability.py tests/run/test_faults.py`.
benchmarks/results/faults.md (included by docs/benchmarks/faults.md, "Faults, and what they
cost") is a copy of them.

Columns: trials; faults injected; detected (refused, reported or named); repaired; rerun;
lost (a value no longer whole); different (a run that finished, exit 0, with another model
than the fault-free run's: must be 0).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

COLUMNS = ["trials", "faults", "detected", "repaired", "rerun", "lost", "different"]
FIGURES: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))


def table(rows: dict[str, dict[str, int]]) -> str:
    lines = ["", "reliability figures (faults injected, detected, repaired, lost):"]
    lines.append(f"  {'':<28}" + "".join(f"{c:>10}" for c in COLUMNS))
    for what, counts in rows.items():
        row = "".join(f"{counts.get(c, 0):>10}" for c in COLUMNS)
        extra = ", ".join(f"{k} {v}" for k, v in counts.items() if k not in COLUMNS)
        lines.append(f"  {what:<28}{row}{'  (' + extra + ')' if extra else ''}")
    return "\n".join(lines)


def printed(request: pytest.FixtureRequest, rows: list[str]) -> None:
    """Print the rows a module added, once its tests are done."""
    text = table({what: FIGURES[what] for what in rows if what in FIGURES})
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(text, flush=True)
