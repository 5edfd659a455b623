"""What makes a federated run the run it is, the same in every mode (workflow, `soma client`).

Both modes derive each (round, client)'s training seed and the run's declared identity from
here, so the same configuration trains the same bits whichever way it is run.

A workflow run records what it is where its receipts live: `results/<run>/run.json` holds
its declared config (`declared`: the keys that change its results) and that config's digest,
written by its `start` job. A workflow started again in that folder with another config is
stopped at parse time, before any job, naming each key that differs (`check_recorded`).
`differences` is how two declared configs (or two meetings, see soma.round) are compared,
key by key. Pure Python, no torch: the Snakefile uses it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from soma.config.configs import ConfigRefused
from soma.differences import differences, shown
from soma.transfer import FULL

RECORD = "run.json"  # in results/<run>/, beside the receipts


def identity(
    task: str, options: Mapping[str, Any], seed: int, base: str | None = None
) -> dict[str, Any]:
    """The part of a run's identity that is not the strategy's: its task, options and seed,
    and the digest of the task's frozen base when it has one (soma.run.base: the weights it
    never trains nor sends, kept once in the store).

    Clients meet under a name keyed by it (see soma.round.Meeting): two runs that share a
    name but differ here never meet. The base is in it only when there is one, so that every
    other run keeps the meeting keys it always had.
    """
    found = {"task": task, "options": dict(options), "seed": seed}
    if base is not None:
        found["base"] = base
    return found


def declared(config: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a workflow config that change a run's results, by their config names.

    `task_options` and `strategy_options` are only the chosen task's and strategy's. Not
    here: `rounds` (more rounds extend a run), `clients_per_job` (the same bits, batched),
    `baselines`, `metric` (what is reported beside it), `site` and
    `sites` (which snakemake runs which clients' jobs: the sites meet in the same rounds). Options
    are read by the one parser (soma.config.options), so `lr: 1e-1` and `lr: 0.1` are one run.
    """
    from soma.config.options import typed

    task, strategy = config["task"], config.get("strategy", "fedavg")
    found = {
        "task": task,
        "task_options": typed((config.get("task_options") or {}).get(task)),
        "seed": config["seed"],
        "clients": config["clients"],
        "strategy": strategy,
        "strategy_options": typed((config.get("strategy_options") or {}).get(strategy)),
        "participation": config.get("participation"),
        "quorum": config.get("quorum"),
        "tree": config.get("tree"),
        "secure_aggregation": _secure(config.get("secure_aggregation")),
    }
    if config.get("personal"):  # only when set: the records of every other run stay as they were
        found["personal"] = sorted(config["personal"])
    if config.get("transfer", FULL) != FULL:  # the same (soma.transfer)
        found["transfer"] = config["transfer"]
    if (config.get("threads") or 1) != 1:  # the same: threads decide a CPU's sums
        found["threads"] = config["threads"]
    return found


def _secure(secure: Any) -> Any:
    """Secure aggregation's keys that change the run: where a client keeps its secrets
    between its jobs (`secrets`) does not."""
    if not isinstance(secure, Mapping):
        return secure
    return {k: v for k, v in secure.items() if k != "secrets"}


def digest(value: Mapping[str, Any]) -> str:
    """The sha256 of `value` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record(config: Mapping[str, Any]) -> dict[str, Any]:
    """What `results/<run>/run.json` holds: the run's name, declared config and its digest."""
    what = declared(config)
    return {"run": config["run"], "declared": what, "digest": digest(what)}


def check_recorded(folder: str | os.PathLike[str], config: Mapping[str, Any]) -> None:
    """Refuse, before any job, a run whose results folder another config made, saying what
    becomes of the store's rounds of that run if the folder is removed (they stay, beside the
    new run's, each meeting keyed by its start).

    Nothing is said where the folder holds no record yet (a new run, or one whose `start`
    has not run).
    """
    path = Path(folder) / RECORD
    try:
        with open(path, encoding="utf-8") as file:
            recorded = json.load(file)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:
        raise ConfigRefused(f"{str(path)!r} cannot be read as a run's record: {error}") from None
    mine = record(config)
    if recorded.get("digest") == mine["digest"]:
        return
    found = differences(recorded.get("declared") or {}, mine["declared"])
    store, run = config.get("store"), config.get("run")
    said = "; ".join(f"`{key}` {shown(old)} there, {shown(new)} here" for key, old, new in found)
    raise ConfigRefused(
        f"config keys differ from the run in {str(folder)!r} (its {RECORD}): "
        f"{said or 'its digest differs'}. To keep both, name a new run (`--config run=NAME`); "
        f"to overwrite that one on purpose, remove {str(folder)!r} first (store {store!r} "
        f"keeps that run's rounds under the same name, shown apart from the new one's by "
        f"`soma status --store {store} --run {run}`; a new `store` leaves them behind)"
    )
