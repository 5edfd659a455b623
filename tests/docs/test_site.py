"""The documentation site builds with `mkdocs build --strict`: a broken link, a page missing
from the nav, an API name mkdocstrings cannot find, fails the suite, not a reader."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from docs_pages import ROOT


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None
    or importlib.util.find_spec("mkdocstrings") is None
    or importlib.util.find_spec("material") is None,
    reason="mkdocs, mkdocs-material or mkdocstrings is not installed: pip install -e '.[docs]'",
)
def test_the_site_builds_strictly(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    api = (tmp_path / "reference" / "api" / "index.html").read_text()
    import soma
    import soma.strategies

    for name in soma.__all__:
        assert f'id="{soma._WHERE.get(name, "soma.errors")}.{name}"' in api, name
    for name in soma.strategies.BUILTIN:
        assert f'id="soma.strategies.{name}.make"' in api, name
