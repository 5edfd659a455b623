"""What the docs' tests share: the site's pages, the reference generator loaded as a module
(so that a mutant can replace its functions), the pattern of a dated measurement, and the
benchmarks' results files their pages include."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks"
# What each benchmark writes (benchmarks/_measure.py's write_result), and its page includes.
RESULTS = ROOT / "benchmarks" / "results"
# pymdownx.snippets' include line, as a benchmark's page spells it (mkdocs.yml: base_path ".").
INCLUDE = re.compile(r'^--8<-- "([^"]+)"\s*$', re.MULTILINE)

# How the benchmarks' prose dates and qualifies a measurement ("Measured 2026-12-05 (load ~1,
# two runs)", "measured at load 1.7-1.8", "(2026-12-04, load 0.9-1.0)"): a sentence of that
# kind belongs on a page under docs/benchmarks/, nowhere else.
DATED = re.compile(
    r"[Mm]easured\s+(?:20\d\d|at|again|so)\b"
    r"|\bload(?:\s+average)?\s+~?\d"
    r"|\bat\s+load\b"
    r"|\(20\d\d-\d\d-\d\d\b"
    r"|\b20\d\d-\d\d-\d\d[,;)]"
)


def dated(text: str) -> list[tuple[int, str]]:
    """Each dated measurement in `text`: its line number and that line."""
    lines = text.splitlines()
    found = []
    for match in DATED.finditer(text):
        number = text.count("\n", 0, match.start()) + 1
        found.append((number, lines[number - 1].strip()))
    return found


def includes(text: str) -> list[str]:
    """The files a page includes, as named (relative to the checkout's root)."""
    return INCLUDE.findall(text)


def benchmark_pages() -> list[Path]:
    """The benchmarks section's pages but its index: each includes its results file."""
    return [p for p in sorted(BENCHMARKS.glob("*.md")) if p.name != "index.md"]


def prose_pages() -> list[Path]:
    """Every page a user reads for what to do or why: all but the benchmarks' (and the README)."""
    pages = [p for p in sorted(DOCS.rglob("*.md")) if BENCHMARKS not in p.parents]
    return [ROOT / "README.md", *pages]


def generator() -> ModuleType:
    """docs/gen_reference.py, imported once as `gen_reference`."""
    if "gen_reference" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["gen_reference"] = module
        spec.loader.exec_module(module)
    return sys.modules["gen_reference"]


def measure() -> ModuleType:
    """benchmarks/_measure.py (the benchmarks' one results writer), imported once under the
    name the benchmarks import it by (`_measure`), so that a mutant can replace its functions."""
    if "_measure" not in sys.modules:
        path = ROOT / "benchmarks" / "_measure.py"
        spec = importlib.util.spec_from_file_location("_measure", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["_measure"] = module
        spec.loader.exec_module(module)
    return sys.modules["_measure"]
