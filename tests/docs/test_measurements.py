"""Tutorials, how-to guides, reference and explanation hold no dated measurement: those are
the benchmarks' results files' (benchmarks/results/, written by the benchmarks and included
by their pages under docs/benchmarks/), where a reader looking for what to do does not have
to read past them."""

from __future__ import annotations

import docs_pages


def test_no_page_outside_the_benchmarks_holds_a_dated_measurement() -> None:
    found = [
        f"{page.relative_to(docs_pages.ROOT)}:{number}: {line}"
        for page in docs_pages.prose_pages()
        for number, line in docs_pages.dated(page.read_text())
    ]
    assert not found, "dated measurements outside docs/benchmarks/ (move them there):\n" + (
        "\n".join(found)
    )


def test_the_pattern_finds_the_benchmarks_own_sentences() -> None:
    text = "Put\n(2026-12-05, best of 5): 107 MB/s.\nMeasured 2026-12-05 (load ~1, two runs)"
    assert [n for n, _ in docs_pages.dated(text)] == [2, 3, 3]
    assert not docs_pages.dated("a log line: since 2025-05-02T10:01:12+00:00, loads of it")
    results = sorted(docs_pages.RESULTS.glob("*.md"))
    assert sum(bool(docs_pages.dated(p.read_text())) for p in results) >= 5


def test_the_benchmarks_pages_hold_no_dated_measurement_but_through_their_results() -> None:
    """A benchmark's page is its undated intro; its runs reach the site through the include."""
    found = [
        f"{page.relative_to(docs_pages.ROOT)}:{number}: {line}"
        for page in docs_pages.benchmark_pages() + [docs_pages.BENCHMARKS / "index.md"]
        for number, line in docs_pages.dated(page.read_text())
    ]
    assert not found, "dated measurements in a page's own text (move them to its results):\n" + (
        "\n".join(found)
    )
