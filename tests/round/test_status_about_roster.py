"""Issue 52's measurement, as a user runs it: `soma status --roster` of a signed run where a
store writer holding no key announced a meeting of 10^7 clients, its `about` unsigned but
hashing to its own meeting's key (0.9 GB and 89 MB of output before). The command stays
under 100 MB of memory and a few kilobytes of output, and says the record was ignored.
(tests/round/test_status_about.py holds the reader's function: the flag without a roster,
an unsigned `about` replacing a genuine one.)"""

from __future__ import annotations

import tracemalloc

import pytest

pytest.importorskip("cryptography")

from signed_runs import RUN, signed_run  # noqa: E402

from soma.cli import main  # noqa: E402
from soma.round import Meeting, announce, layout  # noqa: E402

FORGED = 10**7


def test_soma_status_with_the_roster_ignores_a_forged_meeting_of_ten_million_clients(
    tmp_path, keys, capsys
) -> None:
    store = signed_run(tmp_path / "s", keys)
    genuine = store.recall(next(n for n in store.bound(layout.rounds(RUN)) if n.endswith("about")))
    forged = Meeting(run=RUN, round=1, clients=FORGED, start=genuine["start"], state=None,
                     strategy="fedavg")  # fmt: skip
    announce(store, forged)  # unsigned: its writer holds no key
    assert store.recall(layout.about(forged.prefix))["clients"] == FORGED
    capsys.readouterr()
    roster = ["--roster", str(keys / "roster.json")]
    tracemalloc.start()
    try:
        code = main(["status", "--store", str(store.directory), "--run", RUN, *roster])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    said = capsys.readouterr()
    out = said.out + said.err
    assert peak < 100 << 20, f"{peak / (1 << 20):.0f} MB"
    assert len(out) < 64 << 10, f"{len(out)} characters printed"
    assert "its about record is ignored" in out and "unsigned/forged, ignored" in out, out
    assert str(FORGED) not in out, out  # nothing the ignored record says is shown
    assert code == 1, out[-3000:]
