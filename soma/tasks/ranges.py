"""The range checks of a task's options, worded alike for every task: `<task> option <name>
must be ..., not <value>`, a TaskError raised when the task is made (before any data is
read). Each task binds its name: `_integer = functools.partial(ranges.integer, "digits")`."""

from __future__ import annotations

import math
import numbers

from soma.errors import TaskError


def _real(value: object) -> float | None:
    """`value` as a finite float, or None: a bool is not a number here."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def integer(task: str, name: str, value: object, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise TaskError(f"{task} option {name} must be an integer >= {low}, not {value!r}")


def number(task: str, name: str, value: object, *, low: float, high: float, closed: str) -> None:
    """A finite real number in an interval: `closed` is '[)', '()', '[]' or '(]'."""
    v = _real(value)
    ok = v is not None and (v >= low if closed[0] == "[" else v > low)
    ok = ok and (v <= high if closed[1] == "]" else v < high)
    if not ok:
        raise TaskError(
            f"{task} option {name} must be a number in {closed[0]}{low}, {high}{closed[1]}, "
            f"not {value!r}"
        )


def positive(task: str, name: str, value: object) -> None:
    """A finite real number above 0."""
    v = _real(value)
    if v is None or v <= 0:
        raise TaskError(f"{task} option {name} must be a number > 0, not {value!r}")
