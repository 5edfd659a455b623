"""Broken variants of hierarchical averaging (soma.round.tree); registered into
tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

# --- scale (soma/round/tree.py, soma/cli/) -------------------------------------------------------


@mutant(
    "tree_folds_unweighted",
    caught_by=["tests/round/test_scale.py", "-k", "deep_tree or one_node or taken_over"],
)
def _tree_folds_unweighted() -> None:
    """A node's mean weighs its children the same, whatever their weights."""
    import dataclasses

    import soma.round.tree

    real = soma.round.tree._fold

    def unweighted(store, parts):
        return real(store, [dataclasses.replace(part, weight=1.0) for part in parts])

    _replace(soma.round.tree, "_fold", unweighted)


@mutant(
    "tree_drops_the_last_child",
    caught_by=["tests/round/test_scale.py", "-k", "widths_and_children or deep_tree"],
)
def _tree_drops_the_last_child() -> None:
    """A node's children stop one short: the last input of every full node is never folded."""
    import soma.round.tree

    _replace(
        soma.round.tree,
        "children",
        lambda index, below, fan_in: range(index * fan_in, min((index + 1) * fan_in, below) - 1),
    )


@mutant(
    "tree_claims_nothing",
    caught_by=["tests/round/test_scale.py", "-k", "whoever_does_which_node"],
)
def _tree_claims_nothing() -> None:
    """Every helper computes every node it finds unpublished: nodes computed more than once."""
    import soma.round.once
    import soma.round.tree

    _replace(soma.round.tree, "_offset", lambda who, width: 0)
    real = soma.round.once._claim

    def always(store, place, who, *, check_holder):
        real(store, place, who, check_holder=check_holder)
        return True

    _replace(soma.round.once, "_claim", always)
