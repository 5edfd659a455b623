"""The docs' mutants (tests/docs/): a drift of the generated references, or a dated
measurement outside the benchmarks' pages, that the checks would no longer see."""

import contextlib
import importlib.util
import sys
from pathlib import Path

from mutants import _replace, mutant


def _pages():
    """tests/docs/docs_pages.py, as the tests there import it (`docs_pages`)."""
    if "docs_pages" not in sys.modules:
        path = Path(__file__).with_name("docs_pages.py")
        spec = importlib.util.spec_from_file_location("docs_pages", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["docs_pages"] = module
        spec.loader.exec_module(module)
    return sys.modules["docs_pages"]


@mutant("reference_drift_unseen", caught_by=["tests/docs/test_reference_pages.py"])
def _reference_drift_unseen() -> None:
    """The drift check compares nothing: a stale CLI or config page passes."""

    def differing() -> list[str]:
        return []

    _replace(_pages().generator(), "differing", differing)


@mutant("dated_measurement_unseen", caught_by=["tests/docs/test_measurements.py"])
def _dated_measurement_unseen() -> None:
    """The pattern finds nothing: a dated measurement in a tutorial passes."""

    def dated(text: str) -> list[tuple[int, str]]:
        return []

    _replace(_pages(), "dated", dated)


@mutant("results_written_by_a_failed_run", caught_by=["tests/docs/test_benchmark_pages.py"])
def _results_written_by_a_failed_run() -> None:
    """A benchmark that fails still writes its results file: half a table recorded as a run."""
    measure = _pages().measure()
    real = measure.write_result

    @contextlib.contextmanager
    def recorded(name, *, out=None, pairs=None, notes=()):
        started, tee = measure.Started(), measure._Tee(sys.stdout)
        sys.stdout = tee
        try:
            yield started
        finally:
            sys.stdout = tee.stream
            lines = "".join(tee.parts).splitlines()
            real(name, lines, started=started, out=out, pairs=pairs, notes=notes)

    _replace(measure, "recorded", recorded)
