"""What an audit found: one finding per check and round, and the whole run's report.

Kept apart from the checking so that the checks return plain values and the output (text,
JSON, PROV) is formatted from them alone. A finding is `ok` (the check held), broken (it did
not: the run cannot be trusted from that round on) or unchecked (`ok` None: the check could
not be made, and says why, e.g. an average whose noise came from the operating system).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from soma.errors import SomaError

HOLDS, BROKEN, UNCHECKED = "holds", "broken", "unchecked"


def spans(rounds: Iterable[int]) -> str:
    """Rounds as their runs of consecutive numbers: `0..2, 5` ("none" for none)."""
    found = sorted(set(rounds))
    runs: list[list[int]] = []
    for r in found:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return ", ".join(f"{a[0]}..{a[-1]}" if len(a) > 1 else str(a[0]) for a in runs) or "none"


class AuditFailed(SomaError):
    """The audit found a round broken: the message names the first one, its run and why."""


@dataclass(frozen=True)
class Finding:
    """One check's outcome: which check, whether it held, and what was seen (naming the
    client and the record where there is one)."""

    # blobs | signature | average | chain | participation | privacy | left-out | roster |
    # charter | rounds
    check: str
    ok: bool | None  # True: holds; False: broken; None: could not be checked (detail says why)
    detail: str
    client: int | None = None

    @property
    def outcome(self) -> str:
        return HOLDS if self.ok else (UNCHECKED if self.ok is None else BROKEN)

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "outcome": self.outcome,
            "detail": self.detail,
            "client": self.client,
        }


@dataclass
class RoundAudit:
    """One meeting of one round: who took part, who was left out and why, its average, and
    every finding. `inputs` are the contributions the average names (client, record,
    weights), for the provenance document."""

    round: int
    meeting: str
    findings: list[Finding] = field(default_factory=list)
    took_part: list[int] = field(default_factory=list)
    left_out: list[dict[str, Any]] = field(default_factory=list)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    average: str | None = None  # the average record's digest
    weights: str | None = None
    state: str | None = None
    start: str | None = None
    state_before: str | None = None
    signer: int | None = None  # the roster member whose key signed the average
    strategy: str | None = None
    epsilon: float | None = None

    def add(self, check: str, ok: bool | None, detail: str, client: int | None = None) -> None:
        self.findings.append(Finding(check, ok, detail, client))

    @property
    def broken(self) -> list[Finding]:
        return [f for f in self.findings if f.ok is False]

    def as_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "meeting": self.meeting,
            "outcome": BROKEN if self.broken else HOLDS,
            "took_part": self.took_part,
            "left_out": self.left_out,
            "inputs": self.inputs,
            "average": self.average,
            "weights": self.weights,
            "state": self.state,
            "start": self.start,
            "state_before": self.state_before,
            "signer": self.signer,
            "strategy": self.strategy,
            "epsilon": self.epsilon,
            "findings": [f.as_dict() for f in self.findings],
        }


@dataclass
class AuditReport:
    """A run's audit: the store, the run, which roster the signatures were checked against
    (and how far it is to be trusted; its digest, with the averagers, and the run's charter's),
    each meeting's audit in round order, and what concerns the run as a whole (a stray name,
    the roster)."""

    store: str
    run: str
    roster: str  # how the roster was found (given, read from the store, none)
    rounds: list[RoundAudit] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # the run's, not one round's
    roster_digest: str | None = None  # the roster's the signatures were checked against
    charter: str | None = None  # the digest of the run's charter in the store (a signed run's)

    @property
    def model(self) -> str | None:
        """The weights the run ends with: its last averaged round's."""
        done = [r for r in self.rounds if r.weights is not None]
        return done[-1].weights if done else None

    def first_broken(self) -> tuple[int | None, Finding] | None:
        """The first broken finding, with its round (None: the run's), in round order."""
        for finding in self.findings:
            if finding.ok is False:
                return None, finding
        for audited in self.rounds:
            if audited.broken:
                return audited.round, audited.broken[0]
        return None

    @property
    def clean(self) -> bool:
        return self.first_broken() is None

    def failed(self) -> list[tuple[int | None, Finding]]:
        """Every broken finding, with its round (None: the run's), the run's first, then round
        by round (the first of them is `first_broken()`'s)."""
        found: list[tuple[int | None, Finding]] = [(None, f) for f in self.findings]
        found += [(r.round, f) for r in self.rounds for f in r.findings]
        return [(r, f) for r, f in found if f.ok is False]

    def unchecked(self) -> list[tuple[int | None, Finding]]:
        """Every check that could not be made, with its round (None: the run's), the run's
        first, then round by round."""
        found: list[tuple[int | None, Finding]] = [(None, f) for f in self.findings]
        found += [(r.round, f) for r in self.rounds for f in r.findings]
        return [(r, f) for r, f in found if f.ok is None]

    def failure(self) -> AuditFailed | None:
        """The refusal naming the first broken round (None when every check held)."""
        found = self.first_broken()
        if found is None:
            return None
        r, finding = found
        where = f"run {self.run!r}" if r is None else f"round {r} of run {self.run!r}"
        detail = finding.detail.removeprefix(f"{where}: ")  # a refusal that names it already
        return AuditFailed(f"audit: {where}: {detail}")

    def as_dict(self) -> dict[str, Any]:
        found = self.first_broken()
        return {
            "store": self.store,
            "run": self.run,
            "roster": self.roster,
            "roster_digest": self.roster_digest,
            "charter": self.charter,
            "clean": found is None,
            "first_broken": None if found is None else found[0],
            "model": self.model,
            "findings": [f.as_dict() for f in self.findings],
            "rounds": [r.as_dict() for r in self.rounds],
        }
