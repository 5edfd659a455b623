"""A workflow config as the user meant it, before the schema sees it. Pure, no torch.

Snakemake hands a nested value given on the command line (`--config 'baselines={"alone":
false}'`) over as text at every leaf, and a top-level `run=2024` as a number. These are
read back as the YAML the user typed, so that the schema judges what was meant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Top-level keys that are names, whatever they look like.
TEXT_KEYS = ("run", "store", "task", "metric", "strategy")


def _scalar(text: str) -> Any:
    """A leaf given as text, read as the YAML scalar it spells ("false", "3", "0.5")."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (bool, int, float)) or value is None else text


def _leaves(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _leaves(v) for k, v in value.items()}
    if isinstance(value, str):
        return _scalar(value)
    return value


def typed(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with nested text leaves read as YAML scalars and names kept as text."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in TEXT_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = str(value)
        elif isinstance(value, Mapping):
            out[key] = _leaves(value)
        else:
            out[key] = value
    return out


def default_run(config: Mapping[str, Any]) -> str:
    """The run's name when the config gives none: the task's, the last part of its path."""
    return str(config.get("run") or str(config["task"]).rsplit(".", 1)[-1])
