"""A workflow config as the user meant it, before the schema sees it. Pure, no torch.

Snakemake reads `--config key=text` by rules of its own: the first of Python's `int`,
`float`, `True`/`False` and YAML that keeps every scalar as text, so `tracking=true` arrives
as the text 'true', `seed=010` as 10, `'study={seed: [0, 1]}'` with the seeds '0' and '1'.
`typed` reads each value typed on the command line again, once, from the very text typed
(Snakemake's record of it, `workflow.config_settings.config_args`, which every job is given
too), by the rule of every mode (`soma.config.options.value`: YAML as in a config file, an
exponent's number a float, a mapping's keys their text), and merges it over the config as
Snakemake merged it: a mapping key by key (the file's other keys stay), anything else
replaced. So a value reads the same typed on `--config` or in a config file: `tracking=true`
is true, `seed=010` is 8 (octal, as YAML 1.1 reads it), the study's seeds are 0 and 1;
`True` and `1e-3` read as they always did, `inf` and `nan` are text (YAML spells them `.inf`
and `.nan`). Values from a config file are YAML's already and are left as they are (a quoted
`"3"` in a file stays text), as is a study's point (the Snakefile as a module, whose config
Snakemake gives it whole: the command line was read into the config it was made from).

A name (`run`, `store`, ...) is text whatever it looks like: typed on the command line, the
very text typed (`run=2024` is '2024', `run=007` '007', `run=nan` 'nan'; `run=null` or
nothing is no name, as in a file); from a file, the text of the value YAML read (`run: 2024`
is '2024'). A schema refusal names the config key and shows the value quoted with its type
(`schema_refusal`, `soma.config.options.quoted`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from soma.config import options
from soma.errors import SomaError

# Top-level keys that are names, whatever they look like (a charter's digest of digits alone
# is text too).
TEXT_KEYS = ("run", "store", "task", "metric", "strategy", "site", "charter")


class ConfigRefused(SomaError, ValueError):
    """The run's configuration cannot work; the message starts with the config key(s) to change.

    Raised at parse time (the schema, through `schema_refusal`) and by the `start` job (and
    the jobs that read what it checked) before any client trains, so that a mistake costs
    seconds, not a round of training jobs.
    """


def typed(config: Mapping[str, Any], command_line: Iterable[str] | None = None) -> dict[str, Any]:
    """The config with each value typed on the command line read again from its text, and
    names as text (see the module). `command_line`: the `key=text` texts given to `--config`,
    in order (Snakemake's `workflow.config_settings.config_args`); None where Snakemake did
    not merge them into `config` (a module's config, given whole)."""
    out = dict(config)
    for key, text in _given_texts(command_line):
        read = options.value(text)
        if key in TEXT_KEYS:
            out[key] = read if read is None or isinstance(read, str) else text
        else:
            out[key] = _merged(out.get(key), read)
    for key in TEXT_KEYS:
        if out.get(key) is not None and not isinstance(out[key], str):
            out[key] = _text_of(out[key])
    return out


def _merged(before: Any, read: Any) -> Any:
    """`read` over `before` as Snakemake merges `--config` into the config (update_config): a
    mapping key by key, anything else replaced. New mappings: the config is not changed."""
    if not isinstance(read, Mapping):
        return read
    out = dict(before) if isinstance(before, Mapping) else {}
    for key, item in read.items():
        out[key] = _merged(out.get(key), item)
    return out


def default_run(config: Mapping[str, Any]) -> str:
    """The run's name when the config gives none: the task's, the last part of its path."""
    return str(config.get("run") or str(config["task"]).rsplit(".", 1)[-1])


def _given_texts(command_line: Iterable[str] | None) -> list[tuple[str, str]]:
    """Each `key=text` given to `--config`, in the order given (a later one wins)."""
    given = []
    for arg in command_line or ():
        key, sep, text = str(arg).partition("=")
        if sep:
            given.append((key, text))
    return given


def _text_of(given: Any) -> str:
    """A value that is not text, as the text that spells it in YAML."""
    if isinstance(given, bool):
        return "true" if given else "false"
    return str(given)


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
    if path == ["strategy"] and isinstance(found.instance, str):  # the built-ins, the near one
        from soma.config.lookup import not_a_strategy

        return f"{_where(path)}: {not_a_strategy(found.instance)}"
    about = schema.get("description")
    return f"{_where(path)}: {_with_value(found)}" + (f" ({about})" if about else "")


def _with_value(found: Any) -> str:
    """jsonschema's message, the value it starts with (`'0' is not of type 'integer'`) quoted
    with its type (`soma.config.options.quoted`), as every refusal of a config value shows it."""
    message = str(found.message)
    instance = getattr(found, "instance", None)
    start = repr(instance)
    if message.startswith(start):
        return options.quoted(instance) + message[len(start) :]
    return message


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
