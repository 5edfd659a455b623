"""The seams a user builds on: the strategy base class and its hooks, the registry of
built-ins against the workflow's schema and config, the task protocol and its example."""

from __future__ import annotations

import textwrap

import pytest
import torch

import soma
from soma.strategies import (
    Strategy,
    StrategyError,
    has_own,
    hook,
    load_strategy,
    needs_previous,
    objective_of,
    privacy_of,
    takes_mean,
    uniform,
)

torch.set_num_threads(1)


def net(value: float) -> dict:
    return {"fc": {"w": torch.tensor([value])}}


# --- the base class: every hook declared, with its default --------------------------------------


class OnlyAggregate:
    """A strategy that does not subclass Strategy (duck typing): aggregate alone."""

    def aggregate(self, previous, updates, state, *, clients):
        return soma.fedavg([u.weights for u in updates]), None


def test_a_plain_object_gets_the_bases_defaults_for_every_hook() -> None:
    plain = OnlyAggregate()
    assert not needs_previous(plain) and not uniform(plain) and not takes_mean(plain)
    assert objective_of(plain, start=net(0), state=None, mine=None) is None
    assert hook(plain, "check")([], clients=1) is None
    assert not has_own(plain, "check_state") and not has_own(plain, "privacy_spent")
    assert privacy_of("plain", plain, lambda: pytest.fail("state read for nothing")) is None
    with pytest.raises(AttributeError):
        hook(plain, "needs_previus")  # a hook nobody declared is an error, not a default


def test_each_built_in_subclasses_the_base_and_declares_what_it_has() -> None:
    from soma.strategies import BUILTIN

    for name in BUILTIN:
        options = {"mode": "distributed", "clients_per_round": 2} if name == "dp_fedavg" else {}
        assert isinstance(load_strategy(name, options), Strategy), name
    assert takes_mean(load_strategy("fedadam")) and needs_previous(load_strategy("fedadam"))
    assert not takes_mean(load_strategy("median")) and not needs_previous(load_strategy("median"))
    distributed = load_strategy("dp_fedavg", {"mode": "distributed", "clients_per_round": 2})
    assert uniform(distributed) and takes_mean(distributed)
    assert has_own(load_strategy("dp_fedavg"), "privacy_spent")
    assert not has_own(load_strategy("fedavg"), "privacy_spent")


MYDP = '''
"""A user's own accounting strategy: FedAvg that says it spent 0.5 epsilon a round."""
from soma.aggregate import fedavg
from soma.strategies import Strategy


class Counting(Strategy):
    def __init__(self, answer="good"):
        self.answer = answer

    def aggregate(self, previous, updates, state, *, clients):
        done = 0 if state is None else state["rounds"]
        return fedavg([u.weights for u in updates]), {"rounds": done + 1}

    def privacy_spent(self, state):
        if self.answer == "bad":
            return {"epsilon": "a lot"}
        return {"epsilon": 0.5 * state["rounds"], "delta": 1e-6, "round": state["rounds"]}


def make(answer="good"):
    return Counting(answer)
'''


def test_a_users_own_strategy_reports_its_privacy_in_soma_status(tmp_path, monkeypatch) -> None:
    from soma.round import Meeting, average_round, contribute, status

    (tmp_path / "mydp.py").write_text(textwrap.dedent(MYDP))
    monkeypatch.syspath_prepend(str(tmp_path))
    store = soma.Store(tmp_path / "store")
    start, state = store.put_value(net(0)), None
    for r in range(2):
        meeting = Meeting("mine", r, 1, start=start, state=state, strategy="mydp")
        contribute(store, meeting, net(r + 1), mine=0, size=1)
        record = store.recall_digest(average_round(store, meeting, deadline=5))
        start, state = record["weights"], record["state"]
    spent = [row["privacy"] for row in status(store, "mine")]
    assert spent == [
        {"epsilon": 0.5, "delta": 1e-6, "round": 1},
        {"epsilon": 1.0, "delta": 1e-6, "round": 2},
    ]
    bad = load_strategy("mydp", {"answer": "bad"})
    with pytest.raises(StrategyError, match=r"strategy 'mydp': privacy_spent\(\) returned"):
        privacy_of("mydp", bad, lambda: {"rounds": 1})
