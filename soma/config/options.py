"""How a value typed as text reads, the same in every mode: `--option KEY=VALUE` of `soma
client` and `soma simulate`, `task_options`/`strategy_options` of the workflow, and every value
typed on the workflow's `--config` (soma.config.configs.typed), nested ones included.

The rule is YAML as PyYAML's `safe_load` reads it (YAML 1.1, as Snakemake reads a config
file), so that a value reads alike typed in `config.yaml` or on a command line:

    yes, true, on -> True     no, false, off -> False     null, ~, (empty) -> None
    3 -> 3    007 -> 7    010 -> 8 (a leading 0 is octal in YAML 1.1)    0x1f -> 31
    0.5 -> 0.5    .inf -> inf    .nan -> nan    [1, 2] -> [1, 2]    mlp -> 'mlp'
    inf, nan, 'true', "3" -> text (as in a file: YAML spells infinity .inf)

plus the number forms of YAML 1.2 and JSON that YAML 1.1 reads as text: a number with an
exponent (`1e-1`, `1E5`, `-2e3`, `+1e3`, `1.0e5`) is a float, at any depth (`[1e-3, 1e-2]`).
A mapping's keys are the text typed (`{1: a}` has the key '1'): Snakemake merges a
command-line mapping into the config file's by the keys' text, so a key read as a number
would stand beside the text one instead of replacing it. Text that is not valid YAML stays
text.

A refusal of a value shows it as it was read, quoted, with its type (`quoted`: `'0' (text)`,
`'0' (an integer)`), so that a value that reads as text where a number was meant says so.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from soma.errors import SomaError

# A JSON / YAML 1.2 number with an exponent, which YAML 1.1 wants with a dot and a signed
# exponent.
_EXPONENT = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)[eE][-+]?\d+$")


class BadOption(SomaError, ValueError):
    """An option that is not `KEY=VALUE`; names the option as it was given."""


@functools.cache
def _reader() -> type:
    """`safe_load`'s loader, with an exponent's number a float and a mapping's keys their text.
    Made on first use: PyYAML is not imported with this module (the Snakefile imports it at
    parse time, `soma client` at start)."""
    import yaml

    class Reader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            self.flatten_mapping(node)
            return {
                key.value
                if isinstance(key, yaml.ScalarNode)
                else self.construct_object(key, deep=deep): self.construct_object(item, deep=deep)
                for key, item in node.value
            }

    Reader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+0123456789."))
    return Reader


def value(text: str) -> Any:
    """The value `text` spells (see the module's docstring)."""
    import yaml

    try:
        return yaml.load(text, Loader=_reader())
    except yaml.YAMLError:
        return text


def typed(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Options whose values may be text (a config file's `lr: 1e-1`), each read as `value`."""
    return {k: value(v) if isinstance(v, str) else v for k, v in (options or {}).items()}


# What `quoted` calls each type of value, the first that fits.
_KINDS = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
    (str, "text"),
    (type(None), "null"),
    (Mapping, "a mapping"),
    ((list, tuple), "a list"),
)


def quoted(given: Any) -> str:
    """A value in a refusal: as it reads, quoted, and its type (`'0' (text)`, `'0' (an
    integer)`, `'[0, 1]' (a list)`), so that text is never taken for the number it spells."""
    if isinstance(given, str):
        return f"{given!r} (text)"
    kind = next((name for types, name in _KINDS if isinstance(given, types)), None)
    return f"'{_spelled(given)}' ({kind or type(given).__name__})"


def _spelled(given: Any) -> str:
    """A value that is not text as YAML spells it (`true`, `null`, `.inf`, `[0, x]`)."""
    if given is None or isinstance(given, bool):
        return {None: "null", True: "true", False: "false"}[given]
    if isinstance(given, float) and not math.isfinite(given):
        return ".nan" if math.isnan(given) else ("-.inf" if given < 0 else ".inf")
    if isinstance(given, (int, float)):
        return repr(given)
    try:
        import yaml

        return yaml.safe_dump(_plain(given), default_flow_style=True, width=math.inf).strip()
    except Exception:  # no PyYAML, or a value it cannot write: Python's spelling then
        return repr(given)


def _plain(given: Any) -> Any:
    """Mappings as dicts and tuples as lists, all the way down, as YAML can write them."""
    if isinstance(given, Mapping):
        return {k: _plain(v) for k, v in given.items()}
    if isinstance(given, (list, tuple)):
        return [_plain(v) for v in given]
    return given


def must_be(named: str, what: str, given: Any) -> str:
    """The one form of a value's refusal: `<named> must be <what>, not <quoted(given)>`."""
    return f"{named} must be {what}, not {quoted(given)}"


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
