"""A study: one config whose `study:` grid expands into one run per point. Pure, no torch.

`study: {name: s, strategy: [fedavg, scaffold], seed: [0, 1], target: {metric: accuracy,
value: 0.9}}` is four runs, each the config with the point's values set and its own run name,
`s_strategy-fedavg_seed-0` (the study's name, then each key and value in the grid's order):
its receipts live under results/<that name>/, the study's table under results/s/. Each point's
config is checked by the run layer's pure check (`RunSpec.check`), so a point that cannot
work is refused at parse time, naming the study and the point. The Snakefile makes the one
DAG of every point from these configs (workflow/rules/study.smk).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from soma.config.configs import ConfigRefused, default_run
from soma.config.options import quoted

# What a study's mapping holds besides its grid.
SETTINGS = ("name", "target")
# Config keys a grid cannot vary: the run's name is the point's, and the runs share one store.
FIXED = ("run", "study", "store", "durability")


@dataclass(frozen=True)
class Point:
    """One run of a study: its name, the grid's values at this point, its whole config."""

    run: str
    values: Mapping[str, Any]
    config: dict[str, Any]

    def group(self) -> tuple[tuple[str, str], ...]:
        """The point without its seed: the seeds of one group are averaged together."""
        return tuple((k, text(v)) for k, v in self.values.items() if k != "seed")


@dataclass(frozen=True)
class Study:
    """The study's name, its grid's keys in order, its points, its target (or None)."""

    name: str
    keys: tuple[str, ...]
    points: tuple[Point, ...]
    target: Mapping[str, Any] | None


def text(value: Any) -> str:
    """A grid value as it reads in a run name and a table: its YAML scalar's text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _refused(message: str) -> ConfigRefused:
    return ConfigRefused(f"config key `study`{message}")


def study_of(config: Mapping[str, Any]) -> Study | None:
    """The study the config describes, every point checked; None when it has no `study`."""
    from soma.config.spec import RunSpec

    grid = config.get("study")
    if grid is None:
        return None
    if not isinstance(grid, Mapping):
        raise _refused(f": a mapping of config keys to lists of values, not {quoted(grid)}")
    name = str(grid.get("name") or default_run(config))
    keys = tuple(str(k) for k in grid if k not in SETTINGS)
    if not keys:
        raise _refused(": names no config key to vary (e.g. strategy: [fedavg, scaffold])")
    for key in keys:
        values = grid[key]
        if key in FIXED or key not in config:
            why = "is the same for every run of a study" if key in FIXED else "is not a config key"
            raise _refused(f" (under {key!r}): {key!r} {why}")
        if not isinstance(values, list) or not values:
            raise _refused(f" (under {key!r}): a non-empty list of values, not {quoted(values)}")
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise _refused(f" (under {key!r}): a value is given twice in {values!r}")
    target = _target(grid.get("target"))
    points = []
    for combination in _grid([grid[k] for k in keys]):
        values = dict(zip(keys, combination, strict=True))
        cells = "_".join(f"{k}-{_name_text(v, grid[k])}" for k, v in values.items())
        run = f"{name}_{cells}"
        point = copy.deepcopy({k: v for k, v in config.items() if k != "study"})
        point.update(copy.deepcopy(values))
        point["run"] = run
        try:
            RunSpec.from_config(point).check()
        except ConfigRefused as error:
            raise _refused(f" (the point {cells}): {error}") from None
        points.append(Point(run, values, point))
    return Study(name, keys, tuple(points), target)


def _grid(lists: list[list[Any]]) -> list[tuple[Any, ...]]:
    """Every combination, the first key's values outermost (the order runs are named in)."""
    out: list[tuple[Any, ...]] = [()]
    for values in lists:
        out = [(*done, v) for done in out for v in values]
    return out


# The characters of a run's name (the config schema's `run` pattern).
NAME_TEXT = re.compile(r"[A-Za-z0-9._-]+")


def _name_text(value: Any, values: list[Any]) -> str:
    """A value's text in a run name; a mapping or a list, or text a run's name cannot hold,
    is named by its place in the grid's list."""
    said = text(value)
    if isinstance(value, (Mapping, list)) or not NAME_TEXT.fullmatch(said):
        return str(values.index(value))
    return said


# The characters a Snakemake rule name cannot hold (rule names are Python identifiers).
NOT_IN_A_RULE = re.compile(r"[^A-Za-z0-9]+")


def job_names(study: Study) -> list[str]:
    """Each point's name in its jobs' rule names (`fedadam_seed1` in `fedadam_seed1_train`),
    so that a job says which point it runs: the point's values in the grid's order, a text
    value as itself (`fedadam`) and any other after its key (`seed1`, `participation0_5`;
    a mapping or a list by its place in the grid's list: `task_options1`), made an
    identifier (Snakemake's rule names are). Names that would not be unique, or would begin
    as the study's own rules do (`study_`), are `point<i>` instead: deterministic, as the
    grid is."""
    names = []
    for point in study.points:
        words = []
        for key, value in point.values.items():
            said = NOT_IN_A_RULE.sub("_", _name_text(value, _values(study, key))).strip("_")
            bare = isinstance(value, str) and said[:1].isalpha()
            words.append(said if bare else f"{key}{said}")
        names.append("_".join(words))
    clash = len(set(names)) != len(names) or any(
        n == "study" or n.startswith("study_") for n in names
    )
    return [f"point{i}" for i in range(len(names))] if clash else names


def _values(study: Study, key: str) -> list[Any]:
    """The grid's list of values of `key`, in order (from its points)."""
    seen: list[Any] = []
    for point in study.points:
        if point.values[key] not in seen:
            seen.append(point.values[key])
    return seen


def _target(target: Any) -> Mapping[str, Any] | None:
    if target is None:
        return None
    if (
        not isinstance(target, Mapping)
        or not isinstance(target.get("metric"), str)
        or isinstance(target.get("value"), bool)
        or not isinstance(target.get("value"), (int, float))
        or set(target) != {"metric", "value"}
    ):
        raise _refused(
            f" (under 'target'): {{metric: <name>, value: <number>}}, not {quoted(target)}"
        )
    return dict(target)


def start_groups(study: Study) -> list[list[Point]]:
    """The points whose starting weights are the same (the same task, task options, seed,
    personal nodes, store and metric), in the order of their first point: one start job each."""
    from soma.config.spec import RunSpec

    groups: dict[str, list[Point]] = {}
    for point in study.points:
        spec = RunSpec.from_config(point.config)
        key = json.dumps(
            [spec.identity(), point.config.get("metric"), str(point.config.get("store"))],
            sort_keys=True,
            default=str,
        )
        groups.setdefault(key, []).append(point)
    return list(groups.values())
