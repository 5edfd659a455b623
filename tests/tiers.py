"""Which tests start a process, decided by their code, and the guard that keeps the fast tier
in-process (tests/conftest.py applies both; tests/README.md says how the tiers are decided).

The static rule (`item_starts_a_process`) reads the source of a test function (decorators
included: a parametrize may hand it a starter) and of every fixture of its closure defined
under tests/, docstrings, comments and type annotations dropped: MARKERS in the code, WORKERS
in its strings. Any function or class defined under tests/ that such source names (a helper
from tests/helpers.py, a module-level function of the test's own file, a worker launcher...) is
read the same way, transitively: a helper that starts a process makes every test that names
it, directly or through another helper, start one. Names the code binds itself (parameters,
assignments) are not looked up. What soma and other libraries do is not read: a soma function
that starts a process is caught by the guard instead, and its test is marked slow by hand.

The guard (`guarding`): while a fast test runs, every way of starting a process raises
StartedAProcess at once, naming the test and what it started.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# What, in a test's, fixture's or tests/ helper's own code, starts a process: MARKERS in its
# code (its strings blanked), WORKERS in its strings and in the strings and paths it names
# (WORKER = TESTS / "store_worker.py"). tests/helpers.py's snakemake, soma, soma_processes,
# soma_clients, same_bits_in_every_mode and fault_clients are found through these, by following
# the calls (see above); communicated and finished_together only wait for processes started
# elsewhere.
# tests/test_tiers.py checks that list.
MARKERS = re.compile(
    r"""
      \bsubprocess\.(Popen|run|call|check_call|check_output|getoutput|getstatusoutput)\b
    | \bPopen\(                          # subprocess.Popen imported by name
    | \bmultiprocessing\b | \bProcessPoolExecutor\b
    | \bos\.(system|popen|fork|forkpty|posix_spawnp?|spawn[lv]p?e?)\b
    | \bpty\.(fork|spawn)\b
    | \bcreate_subprocess_(exec|shell)\b  # asyncio's
    """,
    re.VERBOSE,
)
WORKERS = re.compile(r"_worker\.py\b")  # the scripts tests/*_worker.py, run as processes


def _under_tests(thing: object) -> bool:
    """Defined under tests/, and not here: the guard's own code names every process route."""
    try:
        source = inspect.getsourcefile(thing)
    except TypeError:
        return False
    if source is None:
        return False
    source = Path(source).resolve()
    return source.is_relative_to(TESTS) and source != Path(__file__).resolve()


def _code_of(thing: Callable | type) -> ast.AST | None:
    """`thing`'s syntax tree, its docstrings dropped (comments are not in it)."""
    try:
        return _parsed(inspect.getsource(thing))
    except (OSError, TypeError, SyntaxError):
        return None


def _parsed(source: str) -> ast.AST:
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Pass()
    return tree


def _named(tree: ast.AST, names: dict) -> Iterator[object]:
    """What the names (and dotted names: helpers.soma) in `tree` are in `names`, leaving out
    the names `tree` binds itself (parameters, assignments): those are not the globals."""
    local = {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    local |= {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del))
    }
    names = {name: thing for name, thing in names.items() if name not in local}
    for node in ast.walk(tree):
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in names:
            continue
        thing = names[node.id]
        yield thing
        for attr in reversed(chain):  # into modules and classes only: no property is run
            if not (inspect.ismodule(thing) or inspect.isclass(thing)):
                break
            thing = inspect.getattr_static(thing, attr, None)
            if thing is None:
                break
            yield thing


_VISITING: set[object] = set()


class _Blanked(ast.NodeTransformer):
    """The code without its strings and type annotations (`list[subprocess.Popen]`)."""

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        return ast.Constant("") if isinstance(node.value, str) else node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        node.annotation = ast.Name("_")
        return self.generic_visit(node)


def _marked(tree: ast.AST, names: dict, where: str) -> str | None:
    """Why the code `tree`, its globals `names`, starts a process, or None."""
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    named = list(_named(tree, names))
    strings += [str(thing) for thing in named if isinstance(thing, (str, os.PathLike))]
    for string in strings:
        if isinstance(string, str) and WORKERS.search(string):
            return f"{where}: {string}"
    found = MARKERS.search(ast.unparse(_Blanked().visit(tree)))
    if found:
        return f"{where}: {found.group(0).strip()}"
    for thing in named:
        if (inspect.isfunction(thing) or inspect.isclass(thing)) and _under_tests(thing):
            why = starts_a_process(thing)
            if why:
                return f"{where} -> {why}"
    return None


def source_starts_a_process(source: str, names: dict) -> str | None:
    """Why the code `source`, its globals `names`, starts a process by the static rule."""
    return _marked(_parsed(source), names, "<source>")


@functools.cache
def starts_a_process(thing: Callable | type) -> str | None:
    """Why `thing` (a function or class) starts a process by the static rule, or None."""
    thing = inspect.unwrap(thing) if inspect.isfunction(thing) else thing
    tree = _code_of(thing)
    if tree is None or thing in _VISITING:  # a helper that calls itself, back where it started
        return None
    module = inspect.getmodule(thing)
    names = getattr(thing, "__globals__", None) or (vars(module) if module else {})
    _VISITING.add(thing)
    try:
        return _marked(tree, names, f"{thing.__module__}.{thing.__qualname__}")
    finally:
        _VISITING.discard(thing)


def item_starts_a_process(item: object) -> str | None:
    """Why a collected test starts a process by the static rule: its function, or a fixture
    of its closure that is defined under tests/; None where neither does."""
    function = getattr(item, "obj", None)
    things = [function] if function is not None else []
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name in getattr(item, "fixturenames", ()):
        things += [definition.func for definition in definitions.get(name, ())]
    for thing in map(inspect.unwrap, things):
        if _under_tests(thing):
            why = starts_a_process(thing)
            if why:
                return why
    return None


# The guard.


class StartedAProcess(BaseException):
    """A fast test started a process. A BaseException, so that no `except Exception` in soma
    or in a test swallows it on the way out."""


_GUARDED: dict[str, str] = {}  # "test" and "phase", while a guard is installed
_ORIGINALS: list[tuple[object, str, object]] = []
REFUSED: list[str] = []  # what the guard refused since it was installed


def _refuse(what: str) -> None:
    message = (
        f"fast test {_GUARDED.get('test')} started a process ({what}) in its "
        f"{_GUARDED.get('phase')}: it belongs in the slow tier. Mark it @pytest.mark.slow "
        "(saying why), or start the process through a helper the tier rule knows "
        "(tests/tiers.py MARKERS)"
    )
    REFUSED.append(message)
    raise StartedAProcess(message)


def _shown(args: object) -> str:
    shown = repr(list(args) if isinstance(args, (list, tuple)) else args)
    return shown if len(shown) < 300 else shown[:297] + "..."


def _routes() -> list[tuple[object, str, Callable]]:
    """Each place a process is started from, and what to put there instead."""
    import multiprocessing.process
    import multiprocessing.util

    def popen(self, args, *rest, **named):
        _refuse(f"subprocess.Popen {_shown(args)}")

    def process(self):
        _refuse(f"multiprocessing {type(self).__name__}.start, target {self._target!r}")

    def spawn_passing_fds(path, args, passfds):
        _refuse(f"multiprocessing.util.spawnv_passfds {_shown(args)}")

    def os_call(name: str) -> Callable:
        def refused(*args, **named):
            _refuse(f"os.{name}({_shown(args)[1:-1]})")

        return refused

    routes = [
        (subprocess.Popen, "_execute_child", popen),  # run, call, check_output, os.popen...
        (multiprocessing.process.BaseProcess, "start", process),  # Process, Pool, executors
        (multiprocessing.util, "spawnv_passfds", spawn_passing_fds),  # forkserver, trackers
    ]
    # os.spawn* and pty.fork go through os.fork or os.forkpty
    for name in ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            routes.append((os, name, os_call(name)))
    return routes


def _in_an_import() -> bool:
    """Whether the caller runs inside an `import`: a library's own start-up (snakemake's Slurm
    plugin runs `which sacct` when it is first imported), which is not the test's doing and
    happens in whichever test imports it first."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _unless_importing(refusal: Callable, original: object) -> Callable:
    def call(*args, **named):
        if _in_an_import():
            return original(*args, **named)  # type: ignore[operator]
        return refusal(*args, **named)

    return call


def install(test: str, phase: str) -> None:
    """Refuse every process start, for `test`'s `phase`, until `uninstall` (except inside an
    import: `_in_an_import`)."""
    if _ORIGINALS:
        uninstall()
    _GUARDED.update(test=test, phase=phase)
    for owner, name, refusal in _routes():
        original = inspect.getattr_static(owner, name)
        _ORIGINALS.append((owner, name, original))
        setattr(owner, name, _unless_importing(refusal, getattr(owner, name)))


def uninstall() -> None:
    """Put back what `install` replaced; nothing where nothing is installed."""
    while _ORIGINALS:
        owner, name, original = _ORIGINALS.pop()
        setattr(owner, name, original)
    _GUARDED.clear()


def installed() -> bool:
    return bool(_ORIGINALS)


@contextmanager
def guarding(test: str, phase: str) -> Iterator[None]:
    """The guard, over one phase of a fast test. A refusal that the test caught and went on
    from (in a thread, or in an `except BaseException`) still fails the phase afterwards."""
    REFUSED.clear()
    install(test, phase)
    try:
        yield
    finally:
        uninstall()
    if REFUSED:
        raise StartedAProcess(f"{REFUSED[0]} (the error was caught, and the test went on)")
