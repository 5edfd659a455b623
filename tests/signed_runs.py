"""A finished signed run in a real store, and what a store writer holding no key can add to
it: a round of their own, evaluation records (tests of the readers: soma status, soma export,
the workflow's model and best jobs)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from soma.round import layout
from soma.round.signing import Signing, make_keys, read_roster
from soma.run.simulate import simulate
from soma.store import Store

CLIENTS = 3
ROUNDS = 2
RUN = "simulation"


def make_keys_and_roster(folder: Path) -> Path:
    """Every client's key pair in `folder`, and the roster file naming them."""
    roster = {str(k): make_keys(folder, k)[1] for k in range(CLIENTS)}
    path = folder / "roster.json"
    path.write_text(json.dumps(roster))
    return path


def signing_of(keys: Path) -> Signing:
    """The roster as a reader holds it: no private key."""
    return Signing.of(read_roster(keys / "roster.json"), None)


def signed_run(store: Path, keys: Path) -> Store:
    """A two-round signed run of the control task (it evaluates on each client's own data)."""
    simulate("soma.tasks.control", clients=CLIENTS, rounds=ROUNDS, deadline=30,
             roster=keys / "roster.json", keys=str(keys / "{client}.key"), store=store)  # fmt: skip
    return Store(store)


def meeting_of(store: Store, round: int) -> str:
    """The prefix of the run's one meeting of `round`."""
    (found,) = [
        key for r, key in layout.meetings(store.bound(layout.rounds(RUN)), RUN) if r == round
    ]
    return layout.meeting(RUN, round, found)


def fake_round(store: Store) -> tuple[int, str]:
    """An unsigned average record of round ROUNDS (one past the last) whose weights are all
    zero, bound under a meeting's name as the real ones are: (its round, its weights)."""
    real = store.recall(layout.average(meeting_of(store, ROUNDS - 1)))
    record = {k: v for k, v in real.items() if k != "signed"}
    zeros = {
        node: {key: torch.zeros_like(t) for key, t in keys.items()}
        for node, keys in store.recall_digest(record["weights"]).items()
    }
    key = hashlib.sha256(b"a meeting of the forger's").hexdigest()
    record.update(round=ROUNDS, meeting=key, weights=store.put_value(zeros))
    store.keep(layout.average(layout.meeting(RUN, ROUNDS, key)), record)
    return ROUNDS, record["weights"]


def fake_federated(store: Store, round: int, metric: str = "loss") -> dict[str, Any]:
    """Round `round`'s federated evaluation record rewritten, unsigned, to be the best by far
    (as the readers of `--best` rank `metric`); the forged record."""
    prefix = meeting_of(store, round)
    record = {k: v for k, v in store.recall(layout.federated(prefix)).items() if k != "signed"}
    best = -1e9 if metric.endswith("loss") else 1e9
    spread = {s: best for s in ("mean", "min", "p10", "median", "p90", "max")}
    record["evaluation"] = {**record["evaluation"], metric: {**spread, "clients": CLIENTS}}
    store.keep(layout.federated(prefix), record)
    return record
