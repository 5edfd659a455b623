"""An audit report as a W3C PROV-JSON document: what the model came from, by whom, and what
the audit found of it.

Entities are the clients' contributions (their weights), each round's average record and
its weights, and the run's model (the last round's weights), each identified by its sha256
digest (`blob:<digest>`, the store's own content address); activities are the averagings;
agents are the clients (by their roster key, where the run is signed) and whoever signed each
average. Relations: an averaging used the round's start and its contributions, generated the
average and its weights, and was associated with its signer; each contribution is attributed
to its client and each average to its signer. Each averaging names who took part
(`soma:tookPart`), who was left out and why (`soma:leftOutClients`, `soma:leftOut`: "client
2: dropped out: ...") and whether its checks held (`soma:outcome`: holds or broken).

The audit itself is an activity (`soma:audit/<run>`, prov:type `soma:audit`, label "soma
audit", with its start and end time and the auditor's soma version, `soma:version`),
associated with the auditor (`soma:auditor`, a prov:SoftwareAgent); it used every round's
average, the roster (`soma:roster/<digest>`), the charter and the model, and generated the
report (`soma:report/<run>`), whatever the verdict. The report holds `soma:verdict` ("clean"
or "failed"), `soma:failure` (the refusal, naming the first broken round), `soma:failed` and
`soma:unchecked` (each failed check, each check that could not be made, as "round 1: average"
or "the run: roster"), `soma:rosterSource` ("given", "store": read back from the store, not
anchored; "none"), `soma:roster` (how it was found, in words), `soma:rosterDigest`,
`soma:charter` and `soma:model` (digests); and as a prov:Collection, each failed or unchecked
check as a member entity (`soma:finding/...`: `soma:check`, `soma:outcome`, `soma:round`,
`soma:detail`, `soma:client`). Ids are deterministic (from the run, round and meeting), so two
audits of one store write the same document but for the audit's times and version. Output
only.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from soma.audit import roster as rosters
from soma.audit.findings import BROKEN, HOLDS, AuditReport, Finding, RoundAudit

PREFIXES = {"soma": "urn:soma:", "blob": "urn:sha256:"}


def _blob(digest: str) -> str:
    return f"blob:{digest}"


class _Document:
    def __init__(self) -> None:
        self.kinds: dict[str, dict[str, dict[str, Any]]] = {
            kind: {}
            for kind in (
                "entity",
                "activity",
                "agent",
                "used",
                "wasGeneratedBy",
                "wasAttributedTo",
                "wasAssociatedWith",
                "wasDerivedFrom",
                "hadMember",
            )
        }

    def add(self, kind: str, id: str, **attributes: Any) -> str:
        self.kinds[kind].setdefault(id, {}).update(attributes)
        return id

    def relate(self, kind: str, id: str, **ends: Any) -> None:
        self.kinds[kind][f"_:{kind}/{id}"] = ends

    def value(self) -> dict[str, Any]:
        return {"prefix": dict(PREFIXES), **{k: v for k, v in self.kinds.items() if v}}


def _attendance(audited: RoundAudit) -> dict[str, Any]:
    """Who took part in an averaging and who was left out and why, as its attributes (a
    PROV-JSON attribute takes a list of literals; none is written empty)."""
    out: dict[str, Any] = {}
    if audited.took_part:
        out["soma:tookPart"] = list(audited.took_part)
    if audited.left_out:
        out["soma:leftOutClients"] = [left["client"] for left in audited.left_out]
        out["soma:leftOut"] = [
            f"client {left['client']}: {left['why']}" for left in audited.left_out
        ]
    return out


def _round(doc: _Document, run: str, audited: RoundAudit) -> None:
    assert audited.average is not None and audited.weights is not None
    where = f"{run}/round/{audited.round}/{audited.meeting[:16]}"
    activity = doc.add(
        "activity",
        f"soma:averaging/{where}",
        **{"prov:type": "soma:averaging", "soma:round": audited.round},
        **({"soma:strategy": audited.strategy} if audited.strategy else {}),
        **{"soma:outcome": BROKEN if audited.broken else HOLDS},
        **_attendance(audited),
    )
    signer = f"soma:client/{audited.signer}" if audited.signer is not None else "soma:averager"
    doc.add(
        "agent",
        signer,
        **(
            {"prov:type": "prov:SoftwareAgent", "prov:label": "whoever averaged (unsigned)"}
            if audited.signer is None
            else {"prov:label": f"client {audited.signer}"}
        ),
    )
    doc.relate(
        "wasAssociatedWith",
        where,
        **{"prov:activity": activity, "prov:agent": signer, "prov:role": "soma:averager"},
    )
    if audited.start is not None:
        start = doc.add("entity", _blob(audited.start), **{"prov:type": "soma:weights"})
        doc.relate("used", f"{where}/start", **{"prov:activity": activity, "prov:entity": start})
    for given in audited.inputs:
        if not given.get("weights"):
            continue
        k = given["client"]
        entity = doc.add(
            "entity",
            _blob(given["weights"]),
            **{"prov:type": "soma:contribution", "soma:client": k, "soma:round": audited.round},
            **({"soma:record": given["record"]} if given.get("record") else {}),
        )
        client = doc.add("agent", f"soma:client/{k}", **{"prov:label": f"client {k}"})
        doc.relate("used", f"{where}/{k}", **{"prov:activity": activity, "prov:entity": entity})
        doc.relate(
            "wasAttributedTo", f"{where}/{k}", **{"prov:entity": entity, "prov:agent": client}
        )
    for digest, kind in ((audited.average, "soma:average"), (audited.weights, "soma:weights")):
        entity = doc.add(
            "entity", _blob(digest), **{"prov:type": kind, "soma:round": audited.round}
        )
        doc.relate(
            "wasGeneratedBy",
            f"{where}/{kind}",
            **{"prov:entity": entity, "prov:activity": activity},
        )
        doc.relate(
            "wasAttributedTo", f"{where}/{kind}", **{"prov:entity": entity, "prov:agent": signer}
        )
    if audited.start is not None:
        doc.relate(
            "wasDerivedFrom",
            where,
            **{
                "prov:generatedEntity": _blob(audited.weights),
                "prov:usedEntity": _blob(audited.start),
            },
        )


def soma_version() -> str:
    """The auditor's soma version (its installed distribution's; "unknown" outside one)."""

    try:
        return version("soma")
    except PackageNotFoundError:
        return "unknown"


def roster_source(report: AuditReport) -> str:
    """How the roster the signatures were checked against was found: "given" (the
    auditor's, --roster), "store" (read back from the store, not anchored) or "none"."""
    if report.roster.startswith(f"{rosters.GIVEN}:"):
        return "given"
    return "store" if report.roster == rosters.FROM_STORE else "none"


def place(r: int | None) -> str:
    """A finding's place: its round, or the run as a whole."""
    return "the run" if r is None else f"round {r}"


def _audit(
    doc: _Document, report: AuditReport, started: str | None, ended: str | None
) -> tuple[str, str]:
    """The audit as an activity with its auditor, what it used (each round's average, the
    roster, the charter, the model) and the report it generated, with the digests it names:
    (the audit's id, the report's)."""
    run, version = report.run, soma_version()
    audit = doc.add(
        "activity",
        f"soma:audit/{run}",
        **{"prov:type": "soma:audit", "prov:label": "soma audit", "soma:version": version},
        **({"prov:startTime": started} if started else {}),
        **({"prov:endTime": ended} if ended else {}),
    )
    auditor = doc.add(
        "agent",
        "soma:auditor",
        **{"prov:type": "prov:SoftwareAgent", "prov:label": f"soma {version}"},
        **{"soma:version": version},
    )
    doc.relate(
        "wasAssociatedWith",
        f"audit/{run}",
        **{"prov:activity": audit, "prov:agent": auditor, "prov:role": "soma:auditor"},
    )
    used = [
        (f"average/{a.round}/{a.meeting[:16]}", _blob(a.average))
        for a in report.rounds
        if a.average is not None and a.weights is not None
    ]
    if report.roster_digest is not None:
        roster = doc.add(
            "entity",
            f"soma:roster/{report.roster_digest}",
            **{"prov:type": "soma:roster", "prov:label": report.roster},
            **{"soma:digest": report.roster_digest, "soma:rosterSource": roster_source(report)},
        )
        used.append(("roster", roster))
    if report.charter is not None:
        charter = doc.add("entity", _blob(report.charter), **{"prov:type": "soma:charter"})
        used.append(("charter", charter))
    if report.model is not None:
        used.append(("model", _blob(report.model)))
    for what, entity in used:
        doc.relate("used", f"audit/{run}/{what}", **{"prov:activity": audit, "prov:entity": entity})
    said = {
        "soma:run": run,
        "soma:store": report.store,
        "soma:roster": report.roster,
        "soma:rosterSource": roster_source(report),
        "soma:rosterDigest": report.roster_digest,
        "soma:charter": report.charter,
        "soma:model": report.model,
    }
    entity = doc.add(
        "entity",
        f"soma:report/{run}",
        **{
            "prov:type": ["soma:auditReport", "prov:Collection"],
            "prov:label": "soma audit's report",
        },
        **{k: v for k, v in said.items() if v is not None},
    )
    doc.relate("wasGeneratedBy", f"audit/{run}", **{"prov:entity": entity, "prov:activity": audit})
    return audit, entity


def _verdict(doc: _Document, report: AuditReport, audit: str, entity: str) -> None:
    """The verdict on the report entity: clean or failed, the refusal, each failed check and
    each check that could not be made (by round and check), and each as a member entity with
    its reason."""
    failure = report.failure()
    doc.add(
        "entity",
        entity,
        **{"soma:verdict": "clean" if failure is None else "failed"},
        **({} if failure is None else {"soma:failure": str(failure)}),
    )
    for key, found in (("soma:failed", report.failed()), ("soma:unchecked", report.unchecked())):
        if found:
            doc.add("entity", entity, **{key: [f"{place(r)}: {f.check}" for r, f in found]})
        for i, (r, finding) in enumerate(found):
            _finding(doc, report.run, audit, entity, key.split(":")[1], i, r, finding)


def _finding(
    doc: _Document,
    run: str,
    audit: str,
    report: str,
    kind: str,
    i: int,
    r: int | None,
    finding: Finding,
) -> None:
    """One failed or unchecked finding as an entity: a member of the report the audit
    generated it in, with its check, outcome, round (none: the run's), reason and client."""
    member = doc.add(
        "entity",
        f"soma:finding/{run}/{kind}/{i}",
        **{"prov:type": "soma:finding", "prov:label": f"{place(r)}: {finding.check}"},
        **{"soma:check": finding.check, "soma:outcome": finding.outcome},
        **({} if r is None else {"soma:round": r}),
        **{"soma:detail": finding.detail},
        **({} if finding.client is None else {"soma:client": finding.client}),
    )
    doc.relate(
        "hadMember", f"{run}/{kind}/{i}", **{"prov:collection": report, "prov:entity": member}
    )
    doc.relate(
        "wasGeneratedBy",
        f"audit/{run}/{kind}/{i}",
        **{"prov:entity": member, "prov:activity": audit},
    )


def document(
    report: AuditReport, started: str | None = None, ended: str | None = None
) -> dict[str, Any]:
    """The PROV-JSON document of the report's averaged rounds, the model marked, and of the
    audit (begun at `started`, ended at `ended`: ISO 8601 times; None: not said) with the
    report it generated, verdict and all."""
    doc = _Document()
    for audited in report.rounds:
        if audited.average is not None and audited.weights is not None:
            _round(doc, report.run, audited)
    if report.model is not None:
        doc.add(
            "entity",
            _blob(report.model),
            **{"prov:type": "soma:model", "prov:label": f"the model of run {report.run!r}"},
        )
    audit, entity = _audit(doc, report, started, ended)
    _verdict(doc, report, audit, entity)
    return doc.value()
