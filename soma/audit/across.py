"""What spans rounds: the chain (each round starts where the one before ended, from round 0
on), the rounds the store holds (round 0 there; as many as the reader says the run was
configured for) and, for a differentially private run, the privacy ledger recomputed round
by round.

Kept apart from a round's own checks (soma.audit.rounds): these read only what those found
(each meeting's start, state, average weights and state, who took part), plus the states'
values for the ledger. The ledger is the strategy's own arithmetic (`before`, `state_after`
of soma.strategies.dp_fedavg), so the audit accounts a round exactly as the strategy does.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from soma.audit.findings import Finding, RoundAudit, spans
from soma.errors import SomaError
from soma.round.meeting import Meeting
from soma.store import Store
from soma.strategies import StrategyError, load_strategy, under_secure_aggregation


def first_round(averaged: Collection[int]) -> int:
    """The round a run starts at, whichever of its rounds the store still holds (`averaged`):
    round 0. Never the first one found: a run whose first rounds are gone would pass from the
    first round left, which starts from an average no round in the store made."""
    return 0


def check_chain(audits: list[RoundAudit]) -> None:
    """Round r+1 starts from an average of round r: its meeting's `start` is that average's
    weights and its `state` that average's state. A round with no average before it (the
    round before unaveraged, or missing from the store: round 0 too), or one that starts
    from weights no average of the round before published, is broken. A run none of whose
    rounds names its start (bare `soma.gather` calls) is not checked."""
    ended: dict[int, list[RoundAudit]] = {}
    for audited in audits:
        if audited.weights is not None:
            ended.setdefault(audited.round, []).append(audited)
    if ended and all(a.start is None for a in audits if a.weights is not None):
        for audited in audits:  # a run of bare soma.gather calls: no round names its start
            if audited.weights is not None:
                audited.add("chain", None, "no round of the run names its start (bare gather)")
        return
    for audited in audits:
        if audited.weights is None:
            continue
        r = audited.round
        if r == first_round(ended):
            audited.add("chain", None, f"the run's first round starts from {_short(audited.start)}")
            continue
        before = ended.get(r - 1, [])
        source = [b for b in before if b.weights == audited.start]
        if not before:
            audited.add("chain", False, _nothing_before(audited, audits))
        elif not source:
            published = ", ".join(_short(b.weights) for b in before)
            audited.add(
                "chain",
                False,
                f"it starts from weights {_short(audited.start)}, and round {r - 1}'s average "
                f"is {published}",
            )
        elif not any(b.state == audited.state_before for b in source):
            audited.add(
                "chain",
                False,
                f"it starts from strategy state {_short(audited.state_before)}, and round "
                f"{r - 1}'s average left {_short(source[0].state)}",
            )
        else:
            audited.add("chain", True, f"it starts from round {r - 1}'s average weights and state")


def _nothing_before(audited: RoundAudit, audits: list[RoundAudit]) -> str:
    """Why round r has no average of round r-1 to start from: that round is in the store
    unaveraged, or missing from it (with every round back to the last one it holds)."""
    r = audited.round
    if any(a.round == r - 1 for a in audits):
        return f"round {r - 1} has no average for round {r} to start from"
    below = [a.round for a in audits if a.round < r]
    gone = list(range(max(below) + 1 if below else 0, r))
    return (
        f"{_these(gone)} {'is' if len(gone) == 1 else 'are'} missing from the store (deleted, "
        f"or never made), and round {r} starts from {_short(audited.start)}, an average no "
        "round the store holds made"
    )


def check_start(audits: list[RoundAudit]) -> list[Finding]:
    """Round 0 is in the store: a run whose first rounds are gone (deleted, or never made) is
    not taken as starting at the first round left. A run of bare gather calls (no round
    names its start) numbers its rounds as its caller likes: where it began is not checked."""
    held = sorted({a.round for a in audits})
    if not held or held[0] == 0:
        return []
    if all(a.start is None for a in audits):
        return [
            Finding(
                "rounds",
                None,
                f"round 0 is not in the store, and no round names its start (bare gather "
                f"calls): where the run began is not checked (its first round is {held[0]})",
            )
        ]
    return [
        Finding(
            "rounds",
            False,
            "round 0 is missing: the run's first rounds were deleted or never made (the first "
            f"round in the store is {held[0]})",
        )
    ]


def check_total(audits: list[RoundAudit], rounds: int | None) -> Finding:
    """The rounds the store holds against the rounds the run was configured for. That total
    is in nothing the run signs (more rounds extend a run, so no meeting's identity holds
    it: soma.config.identity; run.json is the workflow's folder, not the store), so the
    reader states it (`rounds`, --rounds N): then each of rounds 0..N-1 must be averaged,
    and none be beyond. Without it what was found is said, unchecked: a run whose last
    rounds were deleted reads as a shorter run."""
    held = {a.round for a in audits}
    averaged = sorted({a.round for a in audits if a.weights is not None})
    found = f"{len(averaged)} round{'' if len(averaged) == 1 else 's'} averaged ({spans(averaged)})"
    if rounds is None:
        return Finding(
            "rounds",
            None,
            f"{found}; the configured total was not checked: the run signs it nowhere "
            "(give --rounds N)",
        )
    said = f"the run was configured for {rounds} rounds (--rounds {rounds})"
    missing = [r for r in range(rounds) if r not in held]
    unaveraged = [r for r in range(rounds) if r in held and r not in averaged]
    beyond = sorted(r for r in held if r >= rounds)
    wrong = []
    if missing:
        are = "is" if len(missing) == 1 else "are"
        wrong.append(f"{_these(missing)} {are} missing from the store (deleted, or never made)")
    if unaveraged:
        wrong.append(f"{_these(unaveraged)} {'has' if len(unaveraged) == 1 else 'have'} no average")
    if beyond:
        wrong.append(f"the store holds {_these(beyond)} beyond them")
    if wrong:
        return Finding("rounds", False, f"{said}; " + "; ".join(wrong))
    return Finding("rounds", True, f"{said}: {found}")


def _these(rounds: list[int]) -> str:
    return f"round{'' if len(rounds) == 1 else 's'} {spans(rounds)}"


def check_ledger(store: Store, audits: list[RoundAudit], meetings: dict[int, Meeting]) -> None:
    """A DP run's epsilon, recomputed from the first round on with the strategy's own
    accounting: each round charged to who took part in it (every client, for a round stepped
    from the mean), and the epsilon the average's state reports compared with it.
    `meetings` are the audited meetings by their index in `audits`."""
    ledger: dict[str, Any] = {}  # an average's weights -> the ledger after it
    for i, audited in enumerate(audits):
        meeting = meetings.get(i)
        if meeting is None or audited.state is None or audited.weights is None:
            continue
        try:
            strategy = load_strategy(meeting.strategy, meeting.options, trusted=False)
            if meeting.secure is not None:  # stepped from a secure sum, as the round told it
                strategy = under_secure_aggregation(strategy)
        except SomaError as error:
            audited.add("privacy", None, f"its strategy is not loaded: {error}")
            continue
        if not (hasattr(strategy, "before") and hasattr(strategy, "state_after")):
            continue  # not a ledger soma keeps (only dp_fedavg accounts for privacy)
        first = audited.round == first_round([a.round for a in audits if a.weights is not None])
        if not first and audited.start not in ledger:
            audited.add("privacy", None, "its epsilon is not recomputed: the chain is broken")
            continue
        try:
            after = _round_ledger(store, strategy, meeting, audited, ledger.get(audited.start))
        except SomaError as error:
            audited.add("privacy", False, f"its privacy ledger: {error}")
            continue
        ledger[audited.weights] = after


def _round_ledger(
    store: Store, strategy: Any, meeting: Meeting, audited: RoundAudit, before: Any
) -> dict[str, Any]:
    recorded = store.recall_digest(audited.state)
    clip = recorded.get("clip") if isinstance(recorded, dict) else None
    if not isinstance(clip, (int, float)):
        raise StrategyError(f"its state {_short(audited.state)} is not {meeting.strategy}'s")
    start = strategy.before(before, clients=meeting.clients)
    stepped_from_mean = meeting.secure is not None or (
        meeting.tree is not None and len(audited.took_part) > meeting.tree
    )
    charged = None if stepped_from_mean else audited.took_part
    after = strategy.state_after(start, clip, charged)
    said, recomputed = recorded.get("epsilon"), after["epsilon"]
    audited.epsilon = said if isinstance(said, (int, float)) else None
    whom = "every client" if charged is None else f"clients {charged}"
    if not isinstance(said, (int, float)) or not _same(said, recomputed):
        audited.add(
            "privacy",
            False,
            f"its state reports epsilon {said!r} at delta {after['delta']:g}, and the "
            f"accountant over the rounds, this one charged to {whom}, gives {recomputed:.6g}",
        )
    elif differing := [
        k for k in sorted(after) if k != "clip" and not _same(recorded.get(k), after[k])
    ]:
        audited.add(
            "privacy",
            False,
            f"its state's {', '.join(differing)} are not what the accountant over the rounds gives",
        )
    else:
        audited.add(
            "privacy",
            True,
            f"epsilon {recomputed:.4g} at delta {after['delta']:g} (this round charged to {whom})",
        )
    return after


def _same(a: object, b: object) -> bool:
    """Equal, floats within rounding (the accountant's arithmetic is the strategy's own)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isinf(a) or math.isinf(b):
            return a == b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _short(digest: str | None) -> str:
    return "nothing" if digest is None else digest[:12]
