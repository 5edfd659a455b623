"""A task option's value against the type the task declares for it, before any job: the
field of that name in the class the task's `make()` returns, read from the module's source
without running it (soma.tasks.declared_option_types). `epochs: two` is refused by a dry
run, naming the option, instead of by the `start` job a minute later. Pure, no torch; a task
that declares nothing (no `OPTIONS`, no annotated `make()`) has its values checked by its
own `make()` in the `start` job, as before."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any

from soma.config.options import quoted
from soma.tasks import declared_option_types


def _number(value: Any, kind: type = numbers.Real) -> bool:
    """A number of `kind` (numpy's too: a library user's `np.int64(3)`), not a bool."""
    return isinstance(value, kind) and not isinstance(value, bool)


# What each declared type admits, and what a refusal calls it: an integer is a float's value
# too; a bool is no number (YAML's `yes` is true, not 1).
ADMITS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "int": ("an integer", lambda v: _number(v, numbers.Integral)),
    "float": ("a number", _number),
    "str": ("text", lambda v: isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
}


def type_refusal(task: str, options: Mapping[str, Any]) -> str | None:
    """Why one of `options` (read as soma.config.options reads text) is not of the type task
    module `task` declares for it, in words that follow the option's config key; None when
    every declared one is."""
    for name, (kind, nullable) in (declared_option_types(task) or {}).items():
        if name not in options or options[name] is None and nullable:
            continue
        what, admits = ADMITS[kind]
        if not admits(options[name]):
            return (
                f"option {name!r} of task {task!r} must be {what}"
                f"{' or null' if nullable else ''}, not {quoted(options[name])}"
            )
    return None
