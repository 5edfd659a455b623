"""A run's waits reach every wait of the run (soma.timing): below the drivers no function
defaults `deadline`, `average_deadline` or `lease`, so that a path that forgets to pass the
run's value fails with a TypeError instead of silently waiting an hour (timing.DEADLINE) or
leasing a minute (timing.LEASE). Read from the source (ast), not run: no process, no store."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import torch

import soma
from soma import timing
from soma.round import average as averaging
from soma.store import Store

SOMA = Path(soma.__file__).resolve().parent
WAITS = ("deadline", "average_deadline", "lease")

# The drivers: where a run's waits are first given, so where user-facing defaults may live.
# Everything below them takes the waits as required keyword-only parameters.
DRIVER_MODULES = {
    # the one place the defaults live: `Timing`'s fields, which every driver hands on whole
    "timing.py",
    # `soma client`, `soma simulate` and the rest: a user's --deadline/--lease, defaulted there
    "cli",
    # the workflow's jobs: they read the config's waits (Timing.from_config) and pass them on
    "workflow",
}
DRIVER_FUNCTIONS = {
    # soma.gather: the public API's round barrier, a user's deadline/lease or the defaults
    ("run/gather.py", "gather"),
    # soma.simulate: the public API's whole run, its deadline/lease into the run's Timing
    ("run/simulate.py", "simulate"),
}


def _is_driver_module(relative: str) -> bool:
    return relative in DRIVER_MODULES or relative.split("/")[0] in DRIVER_MODULES


def _defaulted(args: ast.arguments) -> Iterator[tuple[str, ast.expr]]:
    """Each parameter with a default, and its default."""
    positional = [*args.posonlyargs, *args.args]
    yield from zip(
        (a.arg for a in positional[len(positional) - len(args.defaults) :]),
        args.defaults,
        strict=True,
    )
    for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if default is not None:
            yield a.arg, default


def _defaults_in(tree: ast.AST) -> Iterator[tuple[str, int, str, str]]:
    """(qualified name, line, parameter, default) of each wait given a default: a function's
    (or lambda's) parameter, or a class's annotated field (a dataclass's __init__ default)."""

    def visit(node: ast.AST, where: str) -> Iterator[tuple[str, int, str, str]]:
        for child in ast.iter_child_nodes(node):
            name = getattr(child, "name", "<lambda>")
            inner = f"{where}.{name}" if where else name
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                for parameter, default in _defaulted(child.args):
                    if parameter in WAITS:
                        yield inner, child.lineno, parameter, ast.unparse(default)
            if isinstance(child, ast.ClassDef):
                for field in child.body:
                    if (
                        isinstance(field, ast.AnnAssign)
                        and isinstance(field.target, ast.Name)
                        and field.target.id in WAITS
                        and field.value is not None
                    ):
                        yield inner, field.lineno, field.target.id, ast.unparse(field.value)
            inside = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            yield from visit(child, inner if inside else where)

    yield from visit(tree, "")


def _every_default() -> dict[tuple[str, str], list[str]]:
    """(module relative to soma/, qualified name) -> `parameter=default` of each wait."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SOMA.rglob("*.py")):
        relative = path.relative_to(SOMA).as_posix()
        for name, line, parameter, default in _defaults_in(ast.parse(path.read_text())):
            found.setdefault((relative, name), []).append(f"{parameter}={default} (line {line})")
    return found


def test_below_the_drivers_no_function_defaults_a_deadline_or_a_lease() -> None:
    below = {
        f"soma/{module}: {name}({', '.join(said)})"
        for (module, name), said in _every_default().items()
        if not _is_driver_module(module) and (module, name) not in DRIVER_FUNCTIONS
    }
    assert not below, (
        "below the drivers a deadline or lease is passed, never defaulted (soma.timing): "
        + "; ".join(sorted(below))
    )


def test_the_drivers_named_are_drivers_that_default_their_waits() -> None:
    """The allowlist names what is there: each driver function exists and defaults its
    waits (a renamed or moved driver would otherwise leave a stale exemption), and the scan
    sees the one place the defaults live, Timing's fields."""
    found = _every_default()
    for module, name in sorted(DRIVER_FUNCTIONS):
        assert (module, name) in found, f"soma/{module}: no {name}() defaulting a wait"
    assert [s.split(" ")[0] for s in found["timing.py", "Timing"]] == [
        "deadline=DEADLINE",
        "average_deadline=DEADLINE",
        "lease=LEASE",
    ]
    for module in DRIVER_MODULES:
        assert (SOMA / module).exists(), f"soma/{module}: no such driver"


def test_a_function_below_the_drivers_called_without_its_waits_is_a_type_error() -> None:
    """What the rule buys: forgetting the run's waits fails at the call, not an hour later."""
    from soma.round import once
    from soma.secagg import unmask

    for function in (once.once, averaging.average_round, averaging.average_inputs, unmask):
        parameters = inspect.signature(function).parameters
        for wait in ("deadline", "lease"):
            assert parameters[wait].kind is inspect.Parameter.KEYWORD_ONLY, function
            assert parameters[wait].default is inspect.Parameter.empty, function


def test_soma_gather_hands_its_deadline_and_lease_to_the_averaging(tmp_path, monkeypatch) -> None:
    """soma.gather, a driver, passes on the waits it was given (or its defaults) whole."""
    given: list[dict] = []
    real = averaging.average_round

    def recording(store, meeting, **waits):  # noqa: ANN001, ANN202
        given.append(waits)
        return real(store, meeting, **waits)

    monkeypatch.setattr(averaging, "average_round", recording)
    export = {"fc": {"weight": torch.ones(2, 2)}}
    store = Store(tmp_path)
    soma.gather(store, export, run="r", round=0, clients=1, mine=0, deadline=5, lease=7.0)
    soma.gather(store, export, run="r", round=1, clients=1, mine=0)
    assert [(w["deadline"], w["lease"]) for w in given] == [
        (5, 7.0),
        (timing.DEADLINE, timing.LEASE),
    ]
