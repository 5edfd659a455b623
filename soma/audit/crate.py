"""An audit as an RO-Crate (`soma audit --crate DIR`): RO-Crate 1.1 with the Workflow Run
Crate profile (https://w3id.org/ro/wfrun/workflow/0.5, which extends the Process Run Crate,
https://w3id.org/ro/wfrun/process/0.5, and Workflow RO-Crate 1.0).

DIR gets `ro-crate-metadata.json`, the report as `audit.json` (what `--json` prints) and the
PROV-JSON document as `prov.json` (soma.audit.prov). The metadata's root dataset conforms to
the three profiles; its main entity is the workflow, soma's federated averaging (`#soma`: a
run has no workflow file, its plan is soma's rounds under the roster and the charter), and it
mentions two actions:

- `#run`, a CreateAction: the run, whose `instrument` is `#soma`, whose `object` is what it
  began from (the roster's and the charter's digests, round 0's starting weights) and whose
  `result` is the model (`#model`, a PropertyValue: the last average's weights' digest). Its
  `actionStatus` is CompletedActionStatus when every check held and FailedActionStatus when
  one did not, with `error` the refusal naming the first broken round: the store does not
  show the run made that model.
- `#audit`, a CreateAction: this audit, whose `instrument` is `soma audit` (`#soma-audit`,
  the auditor's soma version), with its start and end time, whose `object` is the store and
  the run's digests and whose `result` is the verdict (`#verdict`: "clean" or "failed"), one
  PropertyValue per failed check (`#failed-<i>`) and per check that could not be made
  (`#unchecked-<i>`), each "round 1: average" with its reason, and the two files. The audit
  itself completed either way (CompletedActionStatus): its verdict is its result.

Written as JSON-LD directly, not with ro-crate-py (`rocrate` on PyPI): it is not installed
here, it would be a dependency (with its own: requests, jinja2, arcp...) for one small
document of plain dicts whose shape the two profiles fix, and the document written here is
deterministic but for the audit's times and version. Output only.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from soma.audit.findings import AuditReport
from soma.audit.prov import document, place, roster_source, soma_version

CONTEXT = "https://w3id.org/ro/crate/1.1/context"
RO_CRATE = "https://w3id.org/ro/crate/1.1"
PROCESS_RUN = "https://w3id.org/ro/wfrun/process/0.5"
WORKFLOW_RUN = "https://w3id.org/ro/wfrun/workflow/0.5"
WORKFLOW_CRATE = "https://w3id.org/workflowhub/workflow-ro-crate/1.0"
PROFILES = {
    PROCESS_RUN: ("Process Run Crate", "0.5"),
    WORKFLOW_RUN: ("Workflow Run Crate", "0.5"),
    WORKFLOW_CRATE: ("Workflow RO-Crate", "1.0"),
}
PROV_JSON = "https://www.w3.org/Submission/2013/SUBM-prov-json-20130424/"
COMPLETED = "http://schema.org/CompletedActionStatus"
FAILED = "http://schema.org/FailedActionStatus"
METADATA, REPORT, PROV = "ro-crate-metadata.json", "audit.json", "prov.json"


def _id(name: str) -> dict[str, str]:
    return {"@id": name}


def _value(id: str, name: str, value: Any, description: str) -> dict[str, Any]:
    return {
        "@id": id,
        "@type": "PropertyValue",
        "name": name,
        "value": value,
        "description": description,
    }


def _digests(report: AuditReport) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The PropertyValues of the run's digests: the roster, the charter, round 0's starting
    weights, the model; with the ids of what the run began from, and of what it made."""
    values: list[dict[str, Any]] = []
    began: list[str] = []
    if report.roster_digest is not None:
        source = roster_source(report)
        values.append(
            _value("#roster", "roster", report.roster_digest, f"{source}: {report.roster}")
        )
        began.append("#roster")
    if report.charter is not None:
        said = "the run's charter (two stores that began apart never share it)"
        values.append(_value("#charter", "charter", report.charter, said))
        began.append("#charter")
    first = report.rounds[0] if report.rounds else None
    if first is not None and first.round == 0 and first.start is not None:
        values.append(_value("#start", "start", first.start, "the weights round 0 began from"))
        began.append("#start")
    made: list[str] = []
    if report.model is not None:
        said = "the weights the run ends with (its last average's), by their sha256 digest"
        model = _value("#model", "model", report.model, said)
        values.append({**model, "identifier": f"urn:sha256:{report.model}"})
        made.append("#model")
    return values, began, made


def _verdict(report: AuditReport) -> tuple[list[dict[str, Any]], list[str]]:
    """The verdict, each failed check and each check not made, as PropertyValues."""
    failure = report.failure()
    values = [
        _value(
            "#verdict",
            "verdict",
            "clean" if failure is None else "failed",
            "every check held" if failure is None else str(failure),
        )
    ]
    for kind, name, found in (
        ("failed", "failed check", report.failed()),
        ("unchecked", "check not made", report.unchecked()),
    ):
        for i, (r, finding) in enumerate(found):
            values.append(
                _value(f"#{kind}-{i}", name, f"{place(r)}: {finding.check}", finding.detail)
            )
    return values, [v["@id"] for v in values]


def metadata(
    report: AuditReport, started: str | None = None, ended: str | None = None
) -> dict[str, Any]:
    """`ro-crate-metadata.json` of the audit (see the module); `started` and `ended` are the
    audit's ISO 8601 times (None: not said; the crate's date is then today's)."""

    run, failure = report.run, report.failure()
    digests, began, made = _digests(report)
    verdict, said = _verdict(report)
    averaged = [a.round for a in report.rounds if a.weights is not None]
    strategies = sorted({a.strategy for a in report.rounds if a.strategy})
    status = {"actionStatus": _id(COMPLETED if failure is None else FAILED)}
    if failure is not None:
        status["error"] = str(failure)
    times = {k: v for k, v in (("startTime", started), ("endTime", ended)) if v}
    published = ended or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    version = soma_version()
    graph: list[dict[str, Any]] = [
        {
            "@id": METADATA,
            "@type": "CreativeWork",
            "conformsTo": [_id(RO_CRATE), _id(WORKFLOW_CRATE)],
            "about": _id("./"),
        },
        {
            "@id": "./",
            "@type": "Dataset",
            "name": f"soma run {run!r}, audited",
            "description": f"soma run {run!r} in {report.store}, audited from its store alone: "
            + ("every check held" if failure is None else str(failure)),
            "datePublished": published,
            "conformsTo": [_id(p) for p in PROFILES],
            "mainEntity": _id("#soma"),
            "hasPart": [_id(REPORT), _id(PROV)],
            "mentions": [_id("#run"), _id("#audit")],
        },
        *[
            {"@id": p, "@type": "CreativeWork", "name": name, "version": v}
            for p, (name, v) in PROFILES.items()
        ],
        {
            "@id": "#soma",
            "@type": ["SoftwareSourceCode", "ComputationalWorkflow"],
            "name": "soma federated averaging",
            "description": "rounds of federated averaging on a shared folder or bucket with no "
            "coordinator (soma)"
            + (f"; the run's strategies: {', '.join(strategies)}" if strategies else ""),
            "programmingLanguage": _id("#python"),
        },
        {"@id": "#python", "@type": "ComputerLanguage", "name": "Python"},
        {
            "@id": "#soma-audit",
            "@type": "SoftwareApplication",
            "name": "soma audit",
            "softwareVersion": version,
        },
        {
            "@id": "#run",
            "@type": "CreateAction",
            "name": f"soma run {run!r}",
            "description": f"{len(averaged)} rounds averaged in the store",
            "instrument": _id("#soma"),
            "object": [_id(i) for i in began],
            "result": [_id(i) for i in made],
            **status,
        },
        {
            "@id": "#audit",
            "@type": "CreateAction",
            "name": f"soma audit of run {run!r}",
            "description": f"soma audit --store {report.store} --run {run} (soma {version})",
            "instrument": _id("#soma-audit"),
            **times,
            "object": [_id("#store"), *[_id(i) for i in began + made]],
            "result": [*[_id(i) for i in said], _id(REPORT), _id(PROV)],
            "actionStatus": _id(COMPLETED),
        },
        _value("#store", "store", report.store, "the store audited, read only"),
        *digests,
        *verdict,
        {
            "@id": REPORT,
            "@type": "File",
            "name": "the audit's report (soma audit --json)",
            "encodingFormat": "application/json",
            "about": _id("#run"),
        },
        {
            "@id": PROV,
            "@type": "File",
            "name": "the run's provenance and the audit's verdict (W3C PROV-JSON)",
            "encodingFormat": "application/json",
            "conformsTo": _id(PROV_JSON),
            "about": _id("#run"),
        },
        {"@id": PROV_JSON, "@type": "CreativeWork", "name": "PROV-JSON"},
    ]
    return {"@context": CONTEXT, "@graph": graph}


def _dump(path: Path, value: Any) -> None:
    with open(path, "w") as out:
        json.dump(value, out, indent=2, sort_keys=True)
        out.write("\n")


def write(
    folder: str | Path, report: AuditReport, started: str | None = None, ended: str | None = None
) -> Path:
    """The crate written into `folder` (made if need be): its metadata, the report and the
    PROV-JSON document; the metadata file's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _dump(folder / REPORT, report.as_dict())
    _dump(folder / PROV, document(report, started, ended))
    _dump(folder / METADATA, metadata(report, started, ended))
    return folder / METADATA
