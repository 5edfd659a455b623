"""Personal nodes (FedPer, FedBN, LG-FedAvg): nodes each client keeps for itself.

A run's `personal: [node names]` (`soma client --personal NODE`) names nodes that never
leave a client: a client sends only the other (shared) nodes, so the round's start and its
average hold the shared nodes alone, and nobody averages what a client learnt in its
personal ones. What a client learnt there is kept in the store as its own state, beside
its record of the round (as SCAFFOLD's c_i is: `{"personal": export of those nodes}`,
named by the record's `own`), and loaded back the next round it is sampled for. The
first round it trains, its personal nodes are the task's own start from the run's seed.

Where it cannot work it is refused before anything is written (RunSpec.checked): a name
that is not one of the task's nodes, nothing left to average, a strategy with a client
side (FedProx's proximal term, SCAFFOLD's control variates, DP-FedAvg's clipping are
defined on the weights a client sends), and secure aggregation (its rounds keep no
client's state from one round to the next). A tree of partial means is fine: it averages
whatever the clients send.

Evaluating a personalized model means a client's personal nodes with the shared ones
(`nodes_of_client`); the shared weights alone, with the personal nodes at their start,
are what a central evaluation of the run's average sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from soma.nodes import Export, export, load

KEY = "personal"  # the client's own state: {"personal": {node: {key: tensor}}}


def shared(exported: Export, personal: Iterable[str]) -> Export:
    """What a client sends and a round averages: every node but the personal ones."""
    kept = set(personal)
    return {node: keys for node, keys in exported.items() if node not in kept}


def own_state(exported: Export, personal: Iterable[str]) -> dict[str, Export]:
    """The client's own state after training: its personal nodes' weights."""
    kept = set(personal)
    return {KEY: {node: keys for node, keys in exported.items() if node in kept}}


def personal_weights(own: Any) -> Export | None:
    """The personal nodes' weights in a client's own state, or None (never trained yet)."""
    if isinstance(own, Mapping) and isinstance(own.get(KEY), Mapping):
        return own[KEY]
    return None


def load_round(
    nodes: Mapping[str, Any], weights: Export, own: Any, personal: Sequence[str], fresh: Any
) -> None:
    """Load a round's shared weights into `nodes`, then the client's personal ones: from its
    own state, or, the first time it trains, from `fresh()` (the task's nodes from the run's
    seed), since `nodes` may hold another client's (one process hosts several)."""
    load(nodes, weights, partial=bool(personal))
    if personal:
        kept = personal_weights(own)
        if kept is None:
            kept = own_state(export(fresh()), personal)[KEY]
        load(nodes, kept, partial=True)


def nodes_of_client(task: Any, seed: int, weights: Export, own: Any, personal: Sequence[str]):
    """A client's model, for federated evaluation: the task's nodes from the run's `seed`,
    the shared `weights`, and the client's personal nodes from its own state `own`."""
    nodes = task.nodes(seed)
    load_round(nodes, weights, own, personal, lambda: task.nodes(seed))
    return nodes


def refusal(
    personal: Sequence[str], nodes: Mapping[str, Any], strategy_name: str, strategy: Any
) -> str | None:
    """Why `personal` cannot work with these nodes and this strategy, naming the node (or
    the strategy); None when it can."""
    from soma.strategies import has_client_side

    unknown = [name for name in personal if name not in nodes]
    if unknown:
        return f"node {unknown[0]!r} is not one of the task's nodes ({', '.join(map(repr, nodes))})"
    exported = export(nodes)
    left = [node for node in exported if node not in set(personal)]
    if not left:
        return (
            f"nodes {', '.join(map(repr, personal))} are every node with weights: "
            "nothing would be left to average"
        )
    if has_client_side(strategy):
        return (
            f"strategy {strategy_name!r} changes the clients' local training on the weights "
            "they send; personal nodes work with strategies without a client side"
        )
    return None
