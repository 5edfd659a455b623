"""Every built-in strategy's and task's `make()` says each of its options in its docstring:
the options are the user's (`strategy_options`, `task_options`), and the API reference shows
them from there. Read from the source, so that a task whose extra is not installed is read too."""

from __future__ import annotations

import ast
from pathlib import Path

import docs_pages
import pytest

SOMA = docs_pages.ROOT / "soma"


def _make(path: Path) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "make")


def _declared(path: Path) -> list[str]:
    """A task module's OPTIONS literal (its make() takes **options)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "OPTIONS" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return []


def _strategies() -> list[str]:
    from soma.strategies import BUILTIN

    return sorted(BUILTIN)


@pytest.mark.parametrize("name", _strategies())
def test_each_strategys_make_names_its_options(name: str) -> None:
    make = _make(SOMA / "strategies" / f"{name}.py")
    doc = ast.get_docstring(make) or ""
    arguments = make.args
    options = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
    assert options, name
    missing = [o for o in options if f"`{o}`" not in doc]
    assert doc and not missing, f"soma/strategies/{name}.py: make()'s docstring lacks {missing}"


@pytest.mark.parametrize("name", docs_pages.generator().built_in_tasks())
def test_each_tasks_make_names_its_options(name: str) -> None:
    path = SOMA / "tasks" / f"{name}.py"
    doc = ast.get_docstring(_make(path)) or ""
    options = _declared(path)
    missing = [o for o in options if f"`{o}`" not in doc]
    assert doc and not missing, f"soma/tasks/{name}.py: make()'s docstring lacks {missing}"
