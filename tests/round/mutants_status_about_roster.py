"""A broken variant of `soma status --roster` before an unsigned `about` (soma.round.report,
issue 52: 10^7 clients in a forged about cost 0.9 GB); registered into tests/mutants.py's
MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant(
    "status_roster_believes_an_unsigned_about",
    caught_by=[  # the reader's function first (-x stops there), then the command
        "tests/round/test_status_about.py::test_with_a_roster_an_unsigned_about_record_is_ignored",
        "tests/round/test_status_about_roster.py",
    ],
)
def _status_roster_believes_an_unsigned_about() -> None:
    """`soma status --roster` takes a meeting's about record unchecked, and lists every
    client it says: a forged meeting of 10^7 clients is listed in full."""
    import soma.round.report as report

    _replace(report, "_about_refusal", lambda store, signing, record, key, name, digest: None)
    report.LISTED = 10**9
