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


# --- a tree's waits are the run's (soma/round/tree.py, soma/round/average.py) ---------------------

_TIMING = "tests/round/test_tree_timing.py"


@mutant("tree_node_ignores_deadline", caught_by=[_TIMING, "-k", "ends_the_round_at_its_deadline"])
def _tree_node_ignores_deadline() -> None:
    """A tree's nodes waited for with the old default of an hour, whatever the run's deadline:
    a node held by a live process that never publishes holds the round for an hour."""
    import soma.round.tree
    from soma.timing import DEADLINE

    real = soma.round.tree.reduce

    def reduce(store, prefix, leaves, fan_in, *, deadline, lease, backoff, signing, me=None,
               sleep=soma.round.tree.time.sleep):  # fmt: skip
        return real(store, prefix, leaves, fan_in, deadline=DEADLINE, lease=lease,
                    backoff=backoff, signing=signing, me=me, sleep=sleep)  # fmt: skip

    _replace(soma.round.tree, "reduce", reduce)


@mutant("tree_node_default_lease", caught_by=[_TIMING, "-k", "runs_deadline_lease_polling"])
def _tree_node_default_lease() -> None:
    """A tree's nodes claimed with the default lease, whatever the run's: on a bucket a node's
    holder is taken over after a minute however short or long the run says."""
    import soma.round.tree
    from soma.timing import LEASE

    real = soma.round.tree.reduce

    def reduce(store, prefix, leaves, fan_in, *, deadline, lease, backoff, signing, me=None,
               sleep=soma.round.tree.time.sleep):  # fmt: skip
        return real(store, prefix, leaves, fan_in, deadline=deadline, lease=LEASE,
                    backoff=backoff, signing=signing, me=me, sleep=sleep)  # fmt: skip

    _replace(soma.round.tree, "reduce", reduce)


# both "on_a_bucket" tests: the one on a bucket in memory first (-x stops there), the S3 one after
@mutant("tree_first_claim_without_lease", caught_by=[_TIMING, "-k", "on_a_bucket"])
def _tree_first_claim_without_lease() -> None:
    """A node nobody had taken claimed bare on a bucket, as on a folder: no lease, and a holder
    record nobody on the roster signed, so that every waiter there takes it over at once."""
    import soma.round.once
    import soma.round.tree

    def _take(store, work, inputs, me, who, *, lease, signing):  # noqa: ANN001, ANN202
        place = work.place_
        if store.resolve(place.published) is None and soma.round.once._claim(
            store, place, who, check_holder=False
        ):
            digest = soma.round.tree._fold(store, inputs)
            store.bind(place.computed_by(who), who)
            soma.round.once.publish(store, place.published, digest)

    _replace(soma.round.tree, "_take", _take)
