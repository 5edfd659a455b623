"""A workflow config as the user meant it, before the schema sees it. Pure, no torch.

Snakemake hands a nested value given on the command line (`--config 'baselines={"alone":
false}'`) over as text at every leaf, and reads a top-level one as the first of an
integer, a float, `True`/`False` or YAML that it parses as: `run=2024` arrives as 2024,
`run=007` as 7, `run=nan` as a float NaN, `run=True` as a bool. Nested leaves are read back
as the YAML scalar the user typed (`soma.config.options.scalar`, the one rule of every mode),
so that the schema judges what was meant; a name (`run`, `store`, ...) is always text, the
very text typed after `key=` on the command line (from Snakemake's own record of it, which
every job is given too), or else the value's own text (`run: 2024` in a config file is
'2024'). A schema refusal names the config key (`schema_refusal`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from soma.config.options import scalar
from soma.errors import SomaError

# Top-level keys that are names, whatever they look like.
TEXT_KEYS = ("run", "store", "task", "metric", "strategy", "site")


class ConfigRefused(SomaError, ValueError):
    """The run's configuration cannot work; the message starts with the config key(s) to change.

    Raised at parse time (the schema, through `schema_refusal`) and by the `start` job (and
    the jobs that read what it checked) before any client trains, so that a mistake costs
    seconds, not a round of training jobs.
    """


def _leaves(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _leaves(v) for k, v in value.items()}
    if isinstance(value, str):
        return scalar(value)
    return value


def typed(config: Mapping[str, Any], command_line: Iterable[str] | None = None) -> dict[str, Any]:
    """The config with nested text leaves read as YAML scalars and names kept as text.

    `command_line`: the `key=value` texts given to `--config` (Snakemake's
    `workflow.config_settings.config_args`), whose text a name keeps as it was typed.
    """
    given = _given_texts(command_line)
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in TEXT_KEYS and value is not None and not isinstance(value, str):
            out[key] = given.get(key, _text_of(value))
        elif isinstance(value, Mapping):
            out[key] = _leaves(value)
        else:
            out[key] = value
    return out


def default_run(config: Mapping[str, Any]) -> str:
    """The run's name when the config gives none: the task's, the last part of its path."""
    return str(config.get("run") or str(config["task"]).rsplit(".", 1)[-1])


def _given_texts(command_line: Iterable[str] | None) -> dict[str, str]:
    """Each top-level key's text as given to `--config key=text` (the last one given wins)."""
    texts: dict[str, str] = {}
    for arg in command_line or ():
        key, sep, text = str(arg).partition("=")
        if sep:
            texts[key] = text
    return texts


def _text_of(value: Any) -> str:
    """A value that is not text, as the text that spells it in YAML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def schema_refusal(error: BaseException) -> str | None:
    """The message for a config the schema refused, naming the config key; None when `error`
    is not a schema's refusal.

    Snakemake's `validate` raises a WorkflowError whose context is jsonschema's
    ValidationError: its path names the key, its schema says what the key is.
    """
    found = _validation_error(error)
    if found is None:
        return None
    path = [str(part) for part in getattr(found, "absolute_path", ())]
    schema = getattr(found, "schema", None)
    schema = schema if isinstance(schema, Mapping) else {}
    if getattr(found, "validator", None) == "additionalProperties" and isinstance(
        found.instance, Mapping
    ):
        return _unknown_keys(path, found.instance, schema)
    about = schema.get("description")
    return f"{_where(path)}: {found.message}" + (f" ({about})" if about else "")


def _where(path: list[str]) -> str:
    if not path:
        return "the config"
    under = f" (under {', '.join(map(repr, path[1:]))})" if len(path) > 1 else ""
    return f"config key `{path[0]}`{under}"


def _unknown_keys(path: list[str], instance: Mapping, schema: Mapping) -> str:
    known = list(schema.get("properties") or {})
    unknown = sorted(str(key) for key in instance if key not in known)
    verb = "is" if len(unknown) == 1 else "are"
    if not path:
        named = ", ".join(f"`{key}`" for key in unknown)
        start = f"config key{'s' if len(unknown) > 1 else ''} {named} {verb}"
    else:
        start = f"{_where(path)}: {', '.join(map(repr, unknown))} {verb}"
    takes = f"; the keys are {', '.join(known)}" if known else ""
    return f"{start} unknown{takes}"


def _validation_error(error: BaseException | None) -> Any:
    """jsonschema's ValidationError among `error` and what it was raised from, or None."""
    seen = 0
    while error is not None and seen < 8:
        if type(error).__name__ == "ValidationError" and hasattr(error, "absolute_path"):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None
