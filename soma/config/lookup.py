"""Whether a task or a strategy a run names can be found, decided without importing it: a
mistyped name is refused when the run is checked (a dry run, `soma client` before it starts),
not minutes later at the end of a traceback. Pure Python, no torch: the Snakefile uses it.

A name is refused only where its absence is certain: a top-level module no finder knows, or
a part missing from a package that is a plain folder. Anything else (a namespace package, a
zip, an extension module) is left to the import that uses it, which says what is wrong.
"""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import os
import pkgutil
from pathlib import Path


def missing(path: str) -> bool:
    """Whether module `path` certainly cannot be imported here (see the module)."""
    top, *parts = path.split(".")
    if not top.isidentifier():
        return True
    spec = importlib.machinery.PathFinder.find_spec(top, [os.getcwd()])
    if spec is None:
        try:
            spec = importlib.util.find_spec(top)  # finding a top-level name runs nothing
        except (ImportError, ValueError):
            return False
    if spec is None:
        return True
    for part in parts:
        search = list(getattr(spec, "submodule_search_locations", None) or [])
        if not search or not all(Path(folder).is_dir() for folder in search):
            return False  # a module, a zip, a namespace: its import will say
        spec = importlib.machinery.PathFinder.find_spec(part, search)
        if spec is None:
            return True
    return False


def modules_of(package: str) -> list[str]:
    """The public modules of one of soma's packages (`strategies`: the built-in strategies,
    one a module), listed from its folder without importing it (it may import torch)."""
    spec = importlib.util.find_spec("soma")
    assert spec is not None and spec.submodule_search_locations
    folders = [str(Path(f) / package) for f in spec.submodule_search_locations]
    return sorted(m.name for m in pkgutil.iter_modules(folders) if not m.name.startswith("_"))


def near(name: str, names: list[str]) -> str:
    """`; did you mean 'x'?` for the closest of `names`, or nothing."""
    found = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f"; did you mean {found[0]!r}?" if found else ""


def not_a_strategy(name: str) -> str:
    """Why `name` is no strategy: the built-ins, and the near one."""
    builtins = modules_of("strategies")
    return (
        f"{name!r} is neither a built-in strategy ({', '.join(builtins)}) nor an importable "
        "module" + near(name, builtins)
    )
