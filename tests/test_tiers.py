"""The tiers (tests/tiers.py, tests/conftest.py): a test that starts a process is marked slow by
its code, and a fast test that starts one all the same is stopped by the guard."""

from __future__ import annotations

import inspect
import multiprocessing as mp  # by another name: the static rule reads `multiprocessing`
import os
import subprocess
import sys
from collections.abc import Callable

import helpers
import pytest
import tiers
from tiers import StartedAProcess


def refused(start: Callable[[], object]) -> str:
    """The guard's message for `start`, which must be refused."""
    with pytest.raises(StartedAProcess) as refusal:
        start()
    tiers.REFUSED.clear()  # caught here on purpose: the guard fails a test that swallows it
    return str(refusal.value)


# Each route to a process, hidden from the static rule (getattr) so that only the guard
# stands between this fast test and a process. The routes that would fork this very pytest
# process first check that the guard is there, and fail rather than fork without it.


def _guarded(owner: object, name: str) -> Callable:
    route = getattr(owner, name)
    assert tiers.installed() and route.__module__ == "tiers", f"{name} is not guarded"
    return route


def _run() -> object:
    return getattr(subprocess, "run")([sys.executable, "-c", "pass"])  # noqa: B009 (hidden)


def _system() -> object:
    return getattr(os, "system")("true")  # noqa: B009 (hidden)


def _fork() -> object:
    return _guarded(os, "fork")()


def _spawn() -> object:
    return _guarded(os, "posix_spawn")(sys.executable, [sys.executable, "-c", "pass"], {})


def _process() -> object:
    _guarded(mp.process.BaseProcess, "start")
    process = mp.get_context("spawn").Process(target=int)
    return process.start()


@pytest.mark.parametrize(
    "start, said",
    [
        (_run, f"subprocess.Popen [{sys.executable!r}, '-c', 'pass']"),
        (_system, "os.system('true')"),
        (_fork, "os.fork()"),
        (_spawn, f"os.posix_spawn({sys.executable!r}, ["),
        (_process, "multiprocessing SpawnProcess.start, target <class 'int'>"),
    ],
    ids=["subprocess.run", "os.system", "os.fork", "os.posix_spawn", "multiprocessing"],
)
def test_a_fast_test_that_starts_a_process_is_stopped_naming_itself_and_the_process(
    request: pytest.FixtureRequest, start: Callable[[], object], said: str
) -> None:
    assert request.node.get_closest_marker("fast")
    message = refused(start)
    assert message.startswith(f"fast test {request.node.nodeid} started a process ({said}")
    assert "in its call: it belongs in the slow tier" in message


def test_the_guard_is_there_for_a_fast_tests_fixtures_and_gone_after_it(
    request: pytest.FixtureRequest, tmp_path: object
) -> None:
    assert tiers.installed()
    request.addfinalizer(lambda: refused(_run))  # a function-scoped finalizer: guarded too
    tiers.uninstall()
    for owner, name, _ in tiers._routes():
        assert inspect.getattr_static(owner, name).__module__ != "tiers", name
    tiers.install(request.node.nodeid, "call")


def test_a_refusal_that_the_test_swallowed_fails_it_all_the_same(
    request: pytest.FixtureRequest,
) -> None:
    def swallowed() -> None:
        try:
            _run()
        except StartedAProcess:
            pass

    with pytest.raises(StartedAProcess, match=r"\(the error was caught, and the test went on\)$"):
        with tiers.guarding("a test", "call"):  # in place of this test's own guard...
            swallowed()
    tiers.REFUSED.clear()
    tiers.install(request.node.nodeid, "call")  # ...which is back for the rest of it


@pytest.fixture
def python() -> str:
    """A fixture that starts a process."""
    return subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True).stdout


def _starts_python() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_a_test_whose_fixture_starts_a_process_is_slow(
    request: pytest.FixtureRequest, python: str
) -> None:
    assert request.node.get_closest_marker("slow") and not request.node.get_closest_marker("fast")
    assert "test_tiers.python: subprocess.run" in tiers.item_starts_a_process(request.node)


def test_a_test_that_calls_a_function_that_starts_a_process_is_slow(
    request: pytest.FixtureRequest,
) -> None:
    _starts_python()
    assert request.node.get_closest_marker("slow") and not request.node.get_closest_marker("fast")
    why = tiers.item_starts_a_process(request.node)
    assert why.endswith("-> test_tiers._starts_python: subprocess.run"), why


def test_the_helpers_that_start_a_process_are_those_the_rule_finds() -> None:
    found = {
        name
        for name, thing in vars(helpers).items()
        if callable(thing)
        and getattr(thing, "__module__", None) == "helpers"
        and tiers.starts_a_process(thing)
    }
    assert found == {
        "snakemake",
        "snakemake_process",
        "_Group",  # a Popen
        "soma",
        "soma_process",
        "soma_processes",
        "soma_clients",
        "same_bits_in_every_mode",
        "fault_clients",
    }


def test_what_the_rule_reads_and_what_it_leaves_out(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("fast")  # sources in strings are not its code
    names = vars(helpers)  # as a test file that imported soma, TESTS and soma_env from helpers
    assert (
        tiers.source_starts_a_process(
            """
        def a_docstring_and_comments():
            "subprocess.run, multiprocessing, os.fork: words, not code"
            # subprocess.Popen( in a comment
            return soma_env()  # a helper that starts no process
        """,
            names,
        )
        is None
    )
    assert tiers.source_starts_a_process("def a_parameter(soma): return soma", names) is None
    assert tiers.source_starts_a_process("def f(): return soma('--help')", names) == (
        "<source> -> helpers.soma: subprocess.run"
    )
    script = "round_worker" + ".py"  # in two pieces: the rule reads a test's strings for these
    assert tiers.source_starts_a_process(f"def f(): TESTS / {script!r}", names) == (
        f"<source>: {script}"
    )
    assert tiers.source_starts_a_process("import os\nos.posix_spawnp", {}) == (
        "<source>: os.posix_spawnp"
    )
    worker = {"WORKER": helpers.TESTS / script}
    assert tiers.source_starts_a_process("def f(): return WORKER", worker).endswith(
        f"tests/{script}"
    )
