"""Bucketing (Karimireddy, He and Jaggi 2022, "Byzantine-robust learning on heterogeneous
datasets via bucketing"): the option `bucket` of median, trimmed_mean and krum.

With `bucket: s` (s >= 2), the round's n clients are put in client order, shuffled by a
permutation drawn from (the run's seed, the round), cut in ceil(n / s) buckets of s
consecutive clients (the last one smaller when s does not divide n), and each bucket is
replaced by the unweighted mean of its clients before the robust rule sees anything: the
rule then works on ceil(n / s) bucket means. Honest clients with two labels each disagree
widely; means of s of them disagree less, so the rule throws away less of the honest
signal, while f Byzantine clients still spoil at most f buckets. `bucket: 1` (the default)
is the rule without bucketing, bit for bit.

The shuffle is `torch.randperm` from a generator seeded by sha256 of (seed, round): the
strategy learns both through `Strategy.for_round` (the round's 0-based index and the run's
seed; a round that declares no seed shuffles as seed 0). A rerun round therefore draws the
same buckets; a strategy with bucketing that was never bound to a round refuses to guess.

Memory: nothing more than the rule's own. The means are taken block by block on the
(n, c) blocks the rule already stacks (soma.strategies._columns), giving (ceil(n/s), c).
"""

from __future__ import annotations

import copy
import hashlib
import numbers
from collections.abc import Sequence

import torch

from soma.arithmetic import mean_of_rows
from soma.store import codecs
from soma.strategies import StrategyError, Update

Groups = list[list[int]]


def bucket_size(strategy: str, value: object) -> int:
    """The option `bucket`: a whole number >= 1 (1: no bucketing), or a refusal naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise StrategyError(
            f"{strategy} option bucket={value!r} must be a whole number >= 1 (clients per "
            "bucket; 1 is no bucketing)"
        )
    return int(value)


def count(n: int, s: int) -> int:
    """How many buckets n clients make, s a bucket."""
    return -(-n // s)


def permutation(n: int, *, seed: int | None, round: int) -> list[int]:
    """The shuffle of n clients for (seed, round): the same on every host and every rerun."""
    digest = hashlib.sha256(codecs.canonical_json(["bucketing", seed or 0, round])).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)
    return torch.randperm(n, generator=generator).tolist()


def groups(
    rows: Sequence[Update], s: int, *, seed: int | None, round: int | None, strategy: str
) -> Groups:
    """The buckets, as places in `rows` (which must be in client order), s a bucket."""
    if round is None:
        raise StrategyError(
            f"{strategy} with bucket={s} shuffles by the round and the run's seed, and was not "
            "told them: bind it with soma.strategies.at_round(strategy, round=, seed=) first"
        )
    order = permutation(len(rows), seed=seed, round=round)
    return [order[i : i + s] for i in range(0, len(order), s)]


def in_client_order(rows: list[Update]) -> list[Update]:
    """The rows sorted by client, so that the shuffle does not depend on who came first."""
    return sorted(rows, key=lambda row: row.client)


def means(stacked: torch.Tensor, buckets: Groups) -> torch.Tensor:
    """Per bucket, the unweighted mean of its clients' rows of an (n, c) block: (buckets, c)."""
    return torch.stack([mean_of_rows(stacked[bucket]) for bucket in buckets])


class Bucketing:
    """What median, trimmed_mean and krum share for the option `bucket` (a mixin beside
    Strategy): the bucket size, and the round and seed `for_round` binds."""

    name: str = "strategy"
    bucket: int = 1
    round: int | None = None
    seed: int | None = None

    def for_round(self, *, round: int, seed: int | None) -> Bucketing:
        if self.bucket == 1:
            return self  # nothing drawn: the same object, as every strategy without it
        bound = copy.copy(self)
        bound.round, bound.seed = round, seed
        return bound

    def voters(self, n: int) -> int:
        """How many rows the rule votes over for n clients: the clients, or their buckets."""
        return n if self.bucket == 1 else count(n, self.bucket)

    def bucketed(self, rows: list[Update]) -> tuple[list[Update], Groups | None]:
        """The rows (in client order when bucketed) and their buckets (None: no bucketing)."""
        if self.bucket == 1:
            return rows, None
        rows = in_client_order(rows)
        found = groups(rows, self.bucket, seed=self.seed, round=self.round, strategy=self.name)
        return rows, found
