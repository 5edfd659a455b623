"""What the docs' tests share: the site's pages, the reference generator loaded as a module
(so that a mutant can replace its functions), and the pattern of a dated measurement."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks"

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
