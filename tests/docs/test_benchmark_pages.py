"""A benchmark's page is generated from its own output: the page includes the results file the
benchmark writes (benchmarks/_measure.py's one writer), and that file says when, by which
command, on what machine and under what load each run was taken. These tests hold the
includes (every page's names a file that is there, every file is some page's) and the writer
(its header, the earlier runs it keeps, and nothing written, not even a part, by a run that
fails)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import docs_pages
import pytest


def test_every_benchmark_page_includes_its_results_file_and_it_is_there() -> None:
    wrong = []
    for page in docs_pages.benchmark_pages():
        named = docs_pages.includes(page.read_text())
        wanted = f"benchmarks/results/{page.stem}.md"
        if named != [wanted]:
            wrong.append(f"{page.name} includes {named}, not [{wanted!r}]")
        elif not (docs_pages.ROOT / wanted).is_file():
            wrong.append(f"{page.name} includes {wanted}, which is not there")
    assert not wrong, "\n".join(wrong)


def test_every_results_file_is_some_page_s() -> None:
    included = {
        name
        for page in docs_pages.benchmark_pages()
        for name in docs_pages.includes(page.read_text())
    }
    files = {f"benchmarks/results/{p.name}" for p in docs_pages.RESULTS.glob("*.md")}
    assert files - included == set(), "results files no page includes (add the page to the nav)"


def test_the_include_pattern_reads_a_page_s_line() -> None:
    text = 'Intro.\n\n--8<-- "benchmarks/results/store.md"\n\nand `--8<--` in prose is not one\n'
    assert docs_pages.includes(text) == ["benchmarks/results/store.md"]


def test_a_run_is_written_with_its_header_and_printout(tmp_path: Path) -> None:
    m = docs_pages.measure()
    started = m.Started(when=0.0, argv=("benchmarks/store.py", "--size", "1MB"), load=1.25)
    path = m.write_result("store", ["a table", "  its rows"], started=started, out=tmp_path,
                          pairs="3, alternated", notes=["A note."])  # fmt: skip
    assert path == tmp_path / "store.md"
    text = path.read_text()
    assert text.startswith("## Run of 1970-01-01 00:00 UTC\n")
    assert "| command | `python benchmarks/store.py --size 1MB` |" in text
    assert f"{os.cpu_count()} cores, torch " in text and "CPU capability " in text
    assert "| load average | 1.25 at the start, " in text and " at the end |" in text
    assert "| pairs or repeats | 3, alternated |" in text
    assert "````text\na table\n  its rows\n````" in text and text.endswith("A note.\n")
    assert [p.name for p in tmp_path.iterdir()] == ["store.md"]  # no temporary left


def test_the_newest_run_comes_first_and_a_few_earlier_ones_are_kept(tmp_path: Path) -> None:
    m = docs_pages.measure()
    (tmp_path / "fsyncs.md").write_text("No run of this benchmark is recorded yet.\n")
    for second in range(m.EARLIER_KEPT + 2):
        started = m.Started(when=60.0 * second, argv=("benchmarks/fsyncs.py",), load=0.5)
        printout = [f"run {second}", "## a printout's own heading", "```"]
        m.write_result("fsyncs", printout, started=started, out=tmp_path)
    runs = m.earlier_runs((tmp_path / "fsyncs.md").read_text())
    assert len(runs) == m.EARLIER_KEPT + 1
    assert [r.split("\n", 1)[0][-9:] for r in runs[:2]] == ["00:05 UTC", "00:04 UTC"]
    assert "No run" not in (tmp_path / "fsyncs.md").read_text()  # the placeholder is no run


def test_a_hand_recorded_run_is_kept_below_the_first_written_one(tmp_path: Path) -> None:
    m = docs_pages.measure()
    hand = "## Recorded by hand before this file was generated\n\nMeasured 2026-12-05 (load ~1).\n"
    (tmp_path / "store.md").write_text(hand)
    m.write_result("store", ["new"], started=m.Started(), out=tmp_path)
    text = (tmp_path / "store.md").read_text()
    assert text.startswith("## Run of ") and text.endswith(hand)


def test_a_run_that_fails_writes_nothing_and_leaves_the_last_run(tmp_path: Path) -> None:
    m = docs_pages.measure()
    (tmp_path / "verify.md").write_text("## Run of before\n\nthe last run\n")
    with pytest.raises(RuntimeError), m.recorded("verify", out=tmp_path):
        print("half a table")
        raise RuntimeError("the benchmark failed")
    assert sys.stdout is not None and not isinstance(sys.stdout, m._Tee)
    assert (tmp_path / "verify.md").read_text() == "## Run of before\n\nthe last run\n"
    assert [p.name for p in tmp_path.iterdir()] == ["verify.md"]


def test_a_run_that_ends_writes_what_it_printed(tmp_path: Path, capsys) -> None:
    m = docs_pages.measure()
    with m.recorded("verify", out=tmp_path, pairs="1"):
        print("a row: 1.00 x")
    assert capsys.readouterr().out == "a row: 1.00 x\n"  # the printout as it was
    assert "````text\na row: 1.00 x\n````" in (tmp_path / "verify.md").read_text()


def test_the_folder_is_out_else_the_environment_s_else_benchmarks_results(monkeypatch) -> None:
    m = docs_pages.measure()
    monkeypatch.delenv(m.RESULTS_ENV, raising=False)
    assert m.results_folder() == docs_pages.RESULTS
    monkeypatch.setenv(m.RESULTS_ENV, "/tmp/smoke")
    assert m.results_folder() == Path("/tmp/smoke")
    assert m.results_folder("/tmp/out") == Path("/tmp/out")


def test_a_results_name_that_is_not_a_file_name_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    m = docs_pages.measure()
    with pytest.raises(ValueError, match="results file name"):
        m.write_result("../store", ["x"], started=m.Started(), out=tmp_path / "made")
    assert not (tmp_path / "made").exists()
