"""How a value typed as text reads, the same in every mode: `--option KEY=VALUE` of `soma
client` and `soma simulate`, `task_options`/`strategy_options` of the workflow (Snakemake hands
a nested `--config` value over as text) and every nested leaf of the workflow's config.

The rule is a YAML scalar as PyYAML's `safe_load` reads it (YAML 1.1, as Snakemake reads a
config file), so that a value reads alike typed in `config.yaml` or on a command line:

    yes, true, on -> True     no, false, off -> False     null, ~, (empty) -> None
    3 -> 3    007 -> 7    010 -> 8 (a leading 0 is octal in YAML 1.1)    0x1f -> 31
    0.5 -> 0.5    .inf -> inf    .nan -> nan    [1, 2] -> [1, 2]    mlp -> 'mlp'

plus the number forms of YAML 1.2 and JSON that YAML 1.1 reads as text: an exponent without
a dot (`1e-1`, `1E5`, `-2e3`, `+1e3`) is a float. Text that is not valid YAML stays text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from soma.errors import SomaError

# A JSON / YAML 1.2 number with an exponent, which YAML 1.1 wants with a dot.
_EXPONENT = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)[eE][-+]?\d+")


class BadOption(SomaError, ValueError):
    """An option that is not `KEY=VALUE`; names the option as it was given."""


def value(text: str) -> Any:
    """The value `text` spells (see the module's docstring)."""
    import yaml  # not at import time: the Snakefile imports this module at parse time

    if _EXPONENT.fullmatch(text.strip()):
        return float(text)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def scalar(text: str) -> Any:
    """`value(text)` when it is a scalar (a bool, a number or None), else the text itself:
    a config leaf whose text spells a list stays the text the schema judges."""
    read = value(text)
    return read if read is None or isinstance(read, (bool, int, float)) else text


def typed(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Options whose values may be text (Snakemake's nested `--config`), each read as `value`."""
    return {k: value(v) if isinstance(v, str) else v for k, v in (options or {}).items()}


def clients_of(text: object) -> list[int]:
    """`3`, `0-4`, `0,2,5` or `0-4,8`: a set of clients (those one process or one site
    hosts), sorted and distinct; a ValueError says what is not a client or a range."""
    chosen: set[int] = set()
    for part in str(text).split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise ValueError(
                f"{text!r} is not a client, a range (0-4) or a list of them (0,2,5-7)"
            ) from None
        if low < 0 or high < low:
            raise ValueError(f"{part!r} is not a range of clients from 0 up")
        chosen.update(range(low, high + 1))
    return sorted(chosen)


def pairs(given: Iterable[str], option: str) -> dict[str, Any]:
    """`KEY=VALUE` texts (`--option lr=1e-1`) as options, each value read as `value`; the
    last of a repeated key wins. `option` names the command-line option in a refusal."""
    options: dict[str, Any] = {}
    for pair in given:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise BadOption(f"{option} {pair!r} is not KEY=VALUE")
        options[key] = value(text)
    return options
