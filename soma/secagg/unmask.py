"""Phase 5, unmasking: claimed once (soma.round.once), the secrets rebuilt from the revealed
shares, the masks taken off the sum, the result published; and reading that result back.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from soma.nodes import Export
from soma.round import layout, once
from soma.round.once import POLL, Backoff, Place
from soma.round.waiting import Waiting
from soma.secagg import crypto, masking, shamir
from soma.secagg.errors import BelowThreshold, InconsistentShares, SecAggError
from soma.secagg.messages import anyone, check_signed, clients_in, put_signed, record_of, tree_of
from soma.secagg.ring import Layout, flat_of, layout_of, tensors_of
from soma.secagg.roster import public_keys, roster_before, roster_now
from soma.secagg.session import VERSION, Session, commitment, plural
from soma.store import Store


class _Unmasking:
    """The unmasking as soma.round.once asks about it; the inputs: the revealers' records."""

    def __init__(self, store: Store, session: Session) -> None:
        self.store, self.session, self.what = store, session, session.what

    def done(self) -> str | None:
        return self.store.resolve(self.session.name("sum"))

    def ready(self, past: bool) -> tuple[tuple[int, str], ...] | None:
        session = self.session
        contributors = roster_now(self.store, session, "masked")
        if contributors is None:
            if past:
                raise SecAggError(
                    f"{self.what}: no masked inputs were agreed on before the deadline: the "
                    "clients never got as far as revealing"
                )
            return None
        revealed = clients_in(self.store, session.name("reveal") + "/", contributors)
        if len(revealed) == len(contributors) or (past and len(revealed) >= session.threshold):
            return tuple(sorted(revealed.items()))
        if past:
            raise self._below(contributors, revealed)
        return None

    def _below(
        self, contributors: Mapping[int, str], revealed: Mapping[int, str]
    ) -> BelowThreshold:
        session = self.session
        sharers = roster_before(self.store, session, "shares", None)
        dropped = [d for d in sharers if d not in contributors]
        never = [k for k in contributors if k not in revealed]
        have, need = len(revealed), session.threshold
        return BelowThreshold(
            f"{self.what}: cannot remove the masks: {have} of the {len(contributors)} clients that "
            f"contributed revealed their shares ({plural(sorted(revealed))}; "
            f"{plural(never)} never did), so there are {have} shares of each secret and {need} "
            f"are needed (the threshold). Dropped out after sharing: {plural(dropped)}",
            missing=never,
            dropped=dropped,
            have=have,
            need=need,
        )

    def check(self, inputs: tuple[tuple[int, str], ...]) -> None:
        """Everything refusable, before anything is claimed: layouts that differ, a reveal that
        lacks a share it must give."""
        store, session = self.store, self.session
        contributors = roster_before(store, session, "masked", None)
        sharers = roster_before(store, session, "shares", None)
        dropped = {str(d) for d in sharers if d not in contributors}
        first: tuple[int, Layout] | None = None
        for u, digest in contributors.items():
            where = f"client {u}'s masked input"
            check_signed(store, session, digest, session.name("masked", u), u)
            layout = layout_of(tree_of(store, digest, where), where)
            if first is None:
                first = (u, layout)
            elif layout != first[1]:
                raise SecAggError(
                    f"{self.what}: clients {first[0]} and {u} sent masked inputs of two different "
                    "networks (nodes, keys, shapes or dtypes differ)"
                )
        anyone(session)  # a roster member's key signs the sum, or refused before the claim
        for v, digest in inputs:
            check_signed(store, session, digest, session.name("reveal", v), v)
            record = record_of(store, digest, f"client {v}'s revealed shares")
            b, s = record.get("b"), record.get("s")
            if (
                record.get("client") != v
                or not isinstance(b, dict)
                or not isinstance(s, dict)
                or set(b) != {str(u) for u in contributors}
                or set(s) != dropped
            ):
                raise SecAggError(
                    f"{self.what}: client {v}'s revealed shares are not one share of b for each "
                    "client that contributed and one of s for each that dropped out"
                )

    def place(self, inputs: tuple[tuple[int, str], ...]) -> Place:
        return Place(self.session.name("unmasked"))

    def compute(self, inputs: tuple[tuple[int, str], ...], me: dict[str, Any]) -> str:
        return _unmask(self.store, self.session, dict(inputs), me)

    def settle(self, published: str) -> str:
        name = self.session.name("sum")
        if self.store.resolve(name) is None:
            once.publish(self.store, name, published)
        return self.store.resolve(name) or published

    def missing(self) -> tuple[list[int], str]:
        contributors = roster_now(self.store, self.session, "masked") or {}
        revealed = clients_in(self.store, self.session.name("reveal") + "/", contributors)
        return [k for k in contributors if k not in revealed], " (their shares were not revealed)"


def _rebuild(
    combiner: shamir.Combiner,
    reveals: Mapping[int, Mapping[str, Any]],
    half: str,
    client: int,
    what: str,
) -> bytes:
    """One secret (`half` "b" or "s" of `client`) from the revealed shares, in the order of
    the combiner's x's (x = revealer + 1)."""
    try:
        ys = [int(reveals[x - 1][half][str(client)], 16) for x in combiner.xs]
    except (KeyError, TypeError, ValueError):
        raise SecAggError(f"{what}: a revealed share is missing or not a number") from None
    return shamir.to_bytes(combiner.secret(ys, what), what)


def _unmask(store: Store, session: Session, revealed: Mapping[int, str], me: dict[str, Any]) -> str:
    """Rebuild the secrets, strip the masks off the sum, publish it; the record's digest."""
    keys = public_keys(store, session, roster_before(store, session, "keys", None))
    sharers = roster_before(store, session, "shares", None)
    contributors = roster_before(store, session, "masked", None)
    dropped = [d for d in sharers if d not in contributors]
    reveals = {v: record_of(store, d, f"client {v}'s revealed shares") for v, d in revealed.items()}
    combiner = shamir.Combiner(
        [v + 1 for v in sorted(reveals)], session.threshold, what=f"{session.what}'s secrets"
    )
    seeds = []
    for u in contributors:
        what = f"{session.what}: client {u}'s self-mask seed"
        seed = _rebuild(combiner, reveals, "b", u, what)
        if commitment(session, u, seed) != keys[u]["b_commitment"]:
            raise InconsistentShares(f"{what}: its shares do not rebuild the seed it committed to")
        seeds.append(seed)
    lost = {}
    for d in dropped:
        what = f"{session.what}: dropped client {d}'s mask key"
        private = crypto.private_from_bytes(_rebuild(combiner, reveals, "s", d, what))
        if crypto.public_bytes(private) != keys[d]["s"]:
            raise InconsistentShares(f"{what}: its shares do not rebuild the key it published")
        lost[d] = private
    fixed = session.fixed
    layout: Layout | None = None
    acc: np.ndarray | None = None
    for u, digest in contributors.items():
        where = f"{session.what}: client {u}'s masked input"
        value = store.recall_digest(digest, lazy=True)
        layout = layout_of(value, where)
        flat = flat_of(layout, value, fixed.dtype, where)
        if acc is None:
            acc = flat.copy()
        else:
            np.add(acc, flat, out=acc)
        del value, flat
    assert acc is not None and layout is not None
    masking.remove_self_masks(acc, seeds)
    masking.remove_dropped_masks(acc, session, lost, keys, contributors)
    values = fixed.decode(acc)
    weighted = tensors_of(layout, values[:-1])
    result = {
        "secagg": VERSION,
        "weighted": weighted,
        "total": float(values[-1]),
        "layout": [[n, k, list(s), t] for n, k, s, t in layout],
        "members": list(session.members),
        "contributors": sorted(contributors),
        "dropped": dropped,
        "never_shared": [k for k in keys if k not in sharers],
        "never_advertised": [k for k in session.members if k not in keys],
        "revealed_by": sorted(reveals),
        "threshold": session.threshold,
        "precision_bits": session.precision_bits,
        "ring_bits": session.ring_bits,
        "error_bound": fixed.error(len(contributors)),
        "unmasked_by": me,
    }
    return put_signed(store, session, result, session.name("sum"), anyone(session))


def sum_of(store: Store, digest: str, what: str) -> tuple[Export, float]:
    record = store.recall_digest(digest)
    if not isinstance(record, dict) or record.get("secagg") != VERSION:
        raise SecAggError(f"{what}: the published sum {digest} is not one")
    return record["weighted"], float(record["total"])


def unmask(
    store: Store,
    session: Session,
    *,
    deadline: float | None,
    backoff: Backoff = POLL,
    lease: float,
) -> tuple[Export, float]:
    """Phase 5: the weighted sum (float64 tensors) and the total size, unmasked once.

    Any process may call it (a client, or an averaging job with `Session.read`). It waits for
    every contributor's revealed shares, or past the deadline for at least the threshold of
    them; below it, `BelowThreshold` names the dropped clients and how many shares there are
    against how many are needed. Whoever claims the work computes and publishes (soma.round.once: a
    holder proven gone is taken over); everyone else waits for what was published, and past
    the deadline an AveragerDied (soma.round.once) names who claimed it and never published.
    On a bucket the claim comes with a lease of `lease` seconds, its records signed with the
    session's roster, as a plain round's averaging is.
    """
    if Session.read(store, session.prefix) != session:
        raise SecAggError(f"{session.what}: not the session written down at {session.prefix!r}")
    work = _Unmasking(store, session)
    digest = once.once(
        store, work, deadline=deadline, backoff=backoff, lease=lease, signing=session.signing
    )
    check_signed(store, session, digest, session.name("sum"), None)
    return sum_of(store, digest, session.what)


def published(store: Store, prefix: str) -> dict[str, Any] | None:
    """The published result record at `prefix` (weighted, total, contributors, dropped, ...),
    or None while there is none."""
    digest = store.resolve(layout.session(prefix, "sum"))
    return None if digest is None else store.recall_digest(digest)


def result(
    store: Store, prefix: str, *, deadline: float | None, backoff: Backoff = POLL
) -> tuple[Export, float]:
    """Wait for the sum at `prefix` to be published; (weighted, total). For a client that was
    left out, or any process that only wants the answer."""
    started = time.monotonic()
    waiting = Waiting(f"secure sum {prefix!r}")
    for delay in backoff.delays():
        digest = store.resolve(layout.session(prefix, "sum"))
        if digest is not None:
            return sum_of(store, digest, f"secure sum {prefix!r}")
        if deadline is not None and time.monotonic() - started > deadline:
            raise SecAggError(f"secure sum {prefix!r}: nothing published after {deadline:g}s")
        waiting.tick(str, "the sum, to be published by the clients that took part")
        time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def average(weighted: Export, total: float, like: Export | None = None) -> Export:
    """weighted / total, node by node: the FedAvg mean, in `like`'s dtypes (else float64)."""
    if not isinstance(total, numbers.Real) or not math.isfinite(total) or total <= 0:
        raise SecAggError(f"the total size is {total!r}: there is no mean to take")
    out: Export = {}
    for node, keys in weighted.items():
        out[node] = {}
        for key, tensor in keys.items():
            mean = tensor.to(torch.float64) / total
            dtype = like[node][key].dtype if like is not None else torch.float64
            out[node][key] = mean.to(dtype)
    return out
