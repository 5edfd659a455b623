"""A task or strategy that names no module is refused when the run is checked (a dry run,
`soma client` before it starts), naming the built-ins and the near match; a module of one's
own is found where its import will find it, and nothing is imported to decide."""

from __future__ import annotations

import sys

import pytest

from soma.config.lookup import missing, modules_of
from soma.config.spec import RunSpec
from soma.errors import SomaError


def spec(**given) -> RunSpec:
    return RunSpec(**{"run": "r", "task": "soma.tasks.control", "clients": 2, "rounds": 1, **given})


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"task": "nosuchtask"}, r"config key `task`: no module 'nosuchtask' can be imported"),
        ({"task": "soma.tasks.digts"}, r"did you mean 'soma.tasks.digits'\?"),
        ({"strategy": "fedadma"}, r"built-in strategy \(centered_clip, .*mean 'fedadam'\?"),
        ({"strategy": "nosuch.module"}, r"`strategy`: 'nosuch.module' is neither a built-in"),
    ],
)  # fmt: skip
def test_a_name_no_module_has_is_refused_naming_the_near_one(given, said) -> None:
    with pytest.raises(SomaError, match=said):
        spec(**given).check()


def test_a_module_of_your_own_is_found_where_its_import_finds_it(tmp_path, monkeypatch) -> None:
    (tmp_path / "lookup_probe_task.py").write_text("raise RuntimeError('never imported')\n")
    (tmp_path / "lookup_probe").mkdir()
    (tmp_path / "lookup_probe" / "__init__.py").write_text("raise RuntimeError('nor this')\n")
    (tmp_path / "lookup_probe" / "strategy.py").write_text("")
    monkeypatch.chdir(tmp_path)  # the workflow's tasks: from the working directory
    assert not missing("lookup_probe_task") and not missing("lookup_probe.strategy")
    assert missing("lookup_probe.nosuch") and missing("nosuchtask")
    assert "lookup_probe_task" not in sys.modules and "lookup_probe" not in sys.modules
    spec(task="lookup_probe_task", strategy="lookup_probe.strategy").check()


def test_the_built_in_strategies_are_listed_without_importing_them() -> None:
    import soma.strategies

    assert modules_of("strategies") == sorted(soma.strategies.BUILTIN)
