"""How two declared configs, or two meetings' settings, differ: key by key, nested maps
dotted (`task_options.hidden`), and each value as a message shows it.

Its own torch-free module because the workflow's parse-time check (soma.config.identity: a
results folder of another config) and the round (soma.round.conflicts: meetings of one round that
differ) both say it, and the round must not import the run layer that drives it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

UNSET = object()  # a key one side has and the other has not


def differences(
    theirs: Mapping[str, Any], mine: Mapping[str, Any], within: str = ""
) -> list[tuple[str, Any, Any]]:
    """Each key (dotted into nested maps: `task_options.hidden`) whose value differs, with
    `theirs` and `mine` (`UNSET` where one side has no such key), in key order."""
    found = []
    for key in sorted(set(theirs) | set(mine), key=str):
        a, b = theirs.get(key, UNSET), mine.get(key, UNSET)
        name = f"{within}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            found += differences(a, b, f"{name}.")
        elif a != b or type(a) is not type(b):
            found.append((name, a, b))
    return found


def shown(value: Any) -> str:
    """A value in a message: text as is, anything else as JSON; `UNSET` as "unset"."""
    if value is UNSET:
        return "unset"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
