"""An audit report as a W3C PROV-JSON document: what the model came from, by whom.

Entities are the clients' contributions (their weights), each round's average record and
its weights, and the run's model (the last round's weights), each identified by its sha256
digest (`blob:<digest>`, the store's own content address); activities are the averagings;
agents are the clients (by their roster key, where the run is signed) and whoever signed each
average. Relations: an averaging used the round's start and its contributions, generated the
average and its weights, and was associated with its signer; each contribution is attributed
to its client and each average to its signer. Deterministic (ids from the run, round and
meeting), so two audits of one store write the same document. Output only.
"""

from __future__ import annotations

from typing import Any

from soma.audit.findings import AuditReport, RoundAudit

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
            )
        }

    def add(self, kind: str, id: str, **attributes: Any) -> str:
        self.kinds[kind].setdefault(id, {}).update(attributes)
        return id

    def relate(self, kind: str, id: str, **ends: Any) -> None:
        self.kinds[kind][f"_:{kind}/{id}"] = ends

    def value(self) -> dict[str, Any]:
        return {"prefix": dict(PREFIXES), **{k: v for k, v in self.kinds.items() if v}}


def _round(doc: _Document, run: str, audited: RoundAudit) -> None:
    assert audited.average is not None and audited.weights is not None
    where = f"{run}/round/{audited.round}/{audited.meeting[:16]}"
    activity = doc.add(
        "activity",
        f"soma:averaging/{where}",
        **{"prov:type": "soma:averaging", "soma:round": audited.round},
        **({"soma:strategy": audited.strategy} if audited.strategy else {}),
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


def document(report: AuditReport) -> dict[str, Any]:
    """The PROV-JSON document of the report's averaged rounds, the model marked."""
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
    return doc.value()
