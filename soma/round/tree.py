"""Hierarchical averaging: a round of many clients averaged through a tree of partial means.

The inputs of a round (its clients' weights and sizes, in client order) are the leaves;
every `fan_in` consecutive leaves are one node of level 1, every `fan_in` consecutive nodes
of level 1 one node of level 2, and so on up to a single root. Each node publishes, exactly
once (by claim: `soma.round.once`), the size-weighted mean of its children and their total weight:

    <place>/tree/<level>/<index>/{claimed, takeover/<g>, computed/<who>, published}
    published -> {"mean": <digest of an export>, "weight": <sum of the children's weights>}

On a store with compare-and-swap a node's claim comes with a `lease` there too
(soma.round.lease). A node is waited for and claimed with the run's deadline, lease and
roster, as its averaging is (`reduce`): a node held by a live process that never publishes
ends the round at the run's deadline, naming the node and its holder.

A mean and its weight say what a weighted sum and its weight say (the sum is mean x weight);
keeping means keeps every node in the exports' own dtype and range, and makes a tree of one
node exactly `soma.fedavg` of the inputs, bit for bit. The root's mean is the round's
weighted mean: an exact FedAvg up to floating-point rounding, deterministic whatever the
order of arrival and whoever computes which node, because each node folds its children in
index order (`fedavg` over an iterator) and its children are fixed by the inputs alone.

Nobody is in charge. Every process of the round walks the tree level by level: it first
takes whatever node of the level nobody has claimed (starting from an offset of its own, so
that processes spread over the level instead of racing for node 0), then waits for the
rest of the level (taking over a node whose holder is provably gone), then climbs. A process
holds one running mean and one input at a time (inputs are mapped lazily from the store),
whatever the number of clients. Names fan out: a level has ceil(n / fan_in) nodes, so with
a fan-in of 32 even 100,000 clients put 3,125 entries in the largest folder.

Integer and bool tensors (BatchNorm's `num_batches_tracked`) are counts: every node keeps
its first child's, so the root holds the first input's, as FedAvg does. A node whose
children all weigh zero (clients of size 0) keeps an equal-weight mean and weight 0: its
parent then folds it with weight zero, i.e. not at all.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from soma.errors import SomaError
from soma.round import layout, once
from soma.round import lease as leases
from soma.round.once import Backoff, Place, read_record
from soma.round.signing import Signing
from soma.store import Store

# The smallest fan-in: a node of one child would only copy it.
MIN_FAN_IN = 2


class TreeError(SomaError):
    """A tree that cannot be built as asked (a fan-in below 2, nothing to average)."""


def check_fan_in(fan_in: object) -> int:
    """The fan-in as an int >= 2, or a refusal that names it."""
    if isinstance(fan_in, bool) or not isinstance(fan_in, int) or fan_in < MIN_FAN_IN:
        raise TreeError(f"tree fan-in {fan_in!r} must be an integer >= {MIN_FAN_IN}")
    return fan_in


def widths(count: int, fan_in: int) -> list[int]:
    """How many nodes each level has, from level 1 (over the leaves) up to the root's 1."""
    if count < 1:
        raise TreeError("a tree needs at least one input")
    check_fan_in(fan_in)
    out = []
    width = count
    while True:
        width = -(-width // fan_in)
        out.append(width)
        if width == 1:
            return out


def children(index: int, below: int, fan_in: int) -> range:
    """The indices, at the level below (of `below` entries), of node `index`'s children."""
    return range(index * fan_in, min((index + 1) * fan_in, below))


@dataclass(frozen=True)
class Leaf:
    """One input: the digest of an export, and its weight in the mean (its size, or 1)."""

    weights: str
    weight: float


@dataclass(frozen=True)
class Node:
    """A published node: the digest of its mean (an export) and its total weight."""

    mean: str
    weight: float


def node_place(prefix: str, level: int, index: int) -> Place:
    return Place(layout.tree_node(prefix, level, index))


def _published(store: Store, place: Place) -> Node | None:
    digest = store.resolve(place.published)
    if digest is None:
        return None
    record = read_record(store, digest)
    return Node(record["mean"], float(record["weight"]))


def _fold(store: Store, parts: Sequence[Leaf | Node]) -> str:
    """The record of one node: the weighted mean of its children, kept in the store."""
    from soma.aggregate import fedavg

    weights = [p.weight for p in parts]
    total = math.fsum(weights)
    if total == 0:  # children that weigh nothing: any mean will do, it is folded at weight 0
        weights = [1.0] * len(parts)
    digests = [p.weights if isinstance(p, Leaf) else p.mean for p in parts]

    def pairs() -> Iterator[tuple[Any, float]]:  # one input mapped at a time (zip would keep
        for digest, weight in zip(digests, weights, strict=True):  # the one before alive)
            yield store.recall_digest(digest, lazy=True), weight

    mean = fedavg(pairs())
    return store.put_value({"mean": store.put_value(mean), "weight": total})


def _offset(who: str, width: int) -> int:
    """Where this process starts on a level: spread by who it is, the same on every call."""
    return int(hashlib.sha256(who.encode()).hexdigest()[:8], 16) % width


class _NodeWork:
    """One node of the tree as `soma.round.once` asks about it: ready when its children are."""

    def __init__(
        self, store: Store, prefix: str, level: int, index: int, parts: Callable[[], list | None]
    ) -> None:
        self.store, self.place_ = store, node_place(prefix, level, index)
        self.parts = parts
        self.what = f"tree node {level}/{index} of {prefix}"
        self.nouns = ("partial mean", "node")  # how once's messages name its result and it

    def done(self) -> str | None:
        return self.store.resolve(self.place_.published)

    def ready(self, past: bool) -> list | None:
        return self.parts()

    def check(self, inputs: list) -> None:
        pass

    def place(self, inputs: list) -> Place:
        return self.place_

    def compute(self, inputs: list, me: dict[str, Any]) -> str:
        return _fold(self.store, inputs)

    def settle(self, published: str) -> str:
        return published

    def missing(self) -> tuple[list[int], str]:
        return [], " (its children were never all published)"


def _take(
    store: Store,
    work: _NodeWork,
    inputs: list,
    me: dict[str, Any],
    who: str,
    *,
    lease: float,
    signing: Signing | None,
) -> None:
    """Compute and publish the node `work` (its children `inputs`) if nobody has claimed
    it, without waiting. On a store with compare-and-swap it is claimed as `once` claims
    there: by a holder record signed with `signing` for the node, with a lease of `lease`
    seconds renewed while it computes (a bare claim would be nobody's to a waiter there, and
    taken over at once); on a folder, by `who`."""
    place = work.place_
    if store.resolve(place.published) is not None:
        return
    if leases.leased(store):
        if store.resolve(place.claimed) is None:
            mine = leases.put_holder(store, signing, place.prefix, me)
            watch = leases.Watch(store, signing, lease)
            once._leased(store, work, inputs, place, me, mine, watch, lease, signing)
    elif once._claim(store, place, who, check_holder=False):
        digest = _fold(store, inputs)
        store.bind(place.computed_by(who), who)
        once.publish(store, place.published, digest)


def reduce(
    store: Store,
    prefix: str,
    leaves: Sequence[Leaf],
    fan_in: int,
    *,
    deadline: float | None,
    lease: float,
    backoff: Backoff,
    signing: Signing | None,
    me: dict[str, Any] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Node:
    """The root of the tree over `leaves` under `prefix`, helping to build it on the way.

    Every process of the round may call this with the same leaves: each node is computed
    exactly once, by whoever claims it, and every caller returns the same root.

    A node is waited for as the round's averaging is (soma.round.once), with the run's
    timing (soma.timing), which is why none of it has a default here: its holder for up to
    `deadline` seconds (None: forever), then an AveragerDied names the node and its holder;
    polling by `backoff`. On a store with compare-and-swap a node's claim comes with a lease
    of `lease` seconds, and `signing` (the run's roster, or None) signs its holder and lease
    records there, as the averaging's are.
    """
    from soma.round import holders

    plan = widths(len(leaves), check_fan_in(fan_in))
    me = me or holders.me(role="tree", what=prefix)
    site = me.get("site")
    level_below: Sequence[Leaf | Node] = list(leaves)
    for level, width in enumerate(plan, start=1):
        who = store.put_value(me)  # again at each level: a re-put keeps it past gc's grace
        below = level_below

        def parts(index: int, below: Sequence[Leaf | Node] = below) -> list:
            return [below[j] for j in children(index, len(below), fan_in)]

        start = _offset(who, width)
        for step in range(width):  # first, whatever nobody has taken: no waiting
            index = (start + step) % width
            work = _NodeWork(store, prefix, level, index, lambda i=index: parts(i))
            _take(store, work, parts(index), me, who, lease=lease, signing=signing)
        nodes: list[Leaf | Node] = []
        for index in range(width):  # then the rest, taken over from whoever died holding it
            place = node_place(prefix, level, index)
            node = _published(store, place)
            if node is None:
                work = _NodeWork(store, prefix, level, index, lambda i=index: parts(i))
                once.once(
                    store, work, deadline=deadline, backoff=backoff, sleep=sleep, lease=lease,
                    signing=signing, site=site,
                )  # fmt: skip
                node = _published(store, place)
                assert node is not None
            nodes.append(node)
        level_below = nodes
    root = level_below[0]
    assert isinstance(root, Node)
    return root


def recompute(store: Store, leaves: Sequence[Leaf], fan_in: int) -> Node:
    """The root `reduce` publishes, computed again here without claiming or publishing
    anything (each node's mean put again: `soma repair` rebuilds a lost or corrupt one).
    The same arithmetic in the same order, so the same bits."""
    level: Sequence[Leaf | Node] = list(leaves)
    for width in widths(len(leaves), check_fan_in(fan_in)):
        below = level
        level = []
        for index in range(width):
            digest = _fold(store, [below[j] for j in children(index, len(below), fan_in)])
            record = read_record(store, digest)
            level.append(Node(record["mean"], float(record["weight"])))
    root = level[0]
    assert isinstance(root, Node)
    return root


def mean_of(store: Store, leaves: Sequence[Leaf], fan_in: int) -> tuple[Any, float]:
    """The root's mean (an export) and weight, as `reduce` publishes them, computed here
    reading only: nothing is put, claimed or published (what `soma audit` and a client
    checking an average may do). The same arithmetic in the same order as `_fold`'s, so the
    same bits; depth first, so at most one partial mean per level is held at a time."""
    from soma.aggregate import fedavg

    plan = widths(len(leaves), check_fan_in(fan_in))
    totals: list[list[float]] = [[leaf.weight for leaf in leaves]]
    for width in plan:  # each node's weight first: numbers only, no tensor read
        below = totals[-1]
        totals.append(
            [math.fsum(below[j] for j in children(i, len(below), fan_in)) for i in range(width)]
        )

    def node(level: int, index: int) -> Any:
        if level == 0:
            return store.recall_digest(leaves[index].weights, lazy=True)
        kids = children(index, len(totals[level - 1]), fan_in)
        weights = [totals[level - 1][j] for j in kids]
        if totals[level][index] == 0:  # as _fold: children that weigh nothing, equal weights
            weights = [1.0] * len(weights)
        return fedavg((node(level - 1, j), w) for j, w in zip(kids, weights, strict=True))

    return node(len(plan), 0), totals[-1][0]


def leaves_of(inputs: Sequence[Any], *, uniform: bool = False) -> list[Leaf]:
    """The round's inputs (anything with `.weights` and `.size`) as leaves, in their order;
    `uniform`: every input weighs 1 (a strategy that does not weigh by size)."""
    return [Leaf(i.weights, 1.0 if uniform or i.size is None else float(i.size)) for i in inputs]


def walk(store: Store, prefix: str, count: int, fan_in: int) -> Iterator[tuple[int, int, Place]]:
    """Every node of the tree (level, index, place), for status and verification."""
    for level, width in enumerate(widths(count, fan_in), start=1):
        for index in range(width):
            yield level, index, node_place(prefix, level, index)
