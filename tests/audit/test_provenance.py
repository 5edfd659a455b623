"""soma audit --prov and --crate carry the verdict: the PROV-JSON document names the audit
(an activity with its times and the auditor's version), the report it generated (clean or
failed, each failed check and each check not made, by round and with why, the roster's and
the charter's digests, the model's) and who each round left out; the RO-Crate (RO-Crate 1.1,
Workflow Run Crate 0.5) marks the run FailedActionStatus when the audit failed. Both are
written whatever the verdict, and read back here as a consumer would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cryptography")

from signed_runs import RUN  # noqa: E402
from test_audit import (  # noqa: E402
    BROKEN,
    ROUNDS,
    _forge_a_drop_out,
    _meeting,
    _replace_the_average,
    _signed_run,
)

from soma.audit import crate  # noqa: E402
from soma.audit.roster import roster_digests  # noqa: E402
from soma.cli import main  # noqa: E402
from soma.round import layout  # noqa: E402
from soma.store import Store  # noqa: E402

REPORT = f"soma:report/{RUN}"
RO_CRATE = "https://w3id.org/ro/crate/1.1"  # the spec, which a crate's descriptor conforms to


@pytest.fixture(scope="module")
def clean(tmp_path_factory, keys) -> Path:
    """A finished signed run on a folder, never changed: tests copy it."""
    folder = tmp_path_factory.mktemp("clean") / "store"
    _signed_run(keys, folder)
    return folder


@pytest.fixture
def copied(tmp_path, clean) -> Store:
    shutil.copytree(clean, tmp_path / "store", symlinks=True)
    return Store(tmp_path / "store")


def _audit(store: Store, keys: Path | None, folder: Path, *more: str) -> int:
    roster = [] if keys is None else ["--roster", str(keys / "roster.json")]
    out = ["--prov", str(folder / "audit.prov.json"), "--crate", str(folder / "crate")]
    return main(["audit", "--store", str(store.directory), "--run", RUN, *roster, *out, *more])


# --- reading the two documents back, as a consumer would -------------------------------------


def _prov(path: Path) -> dict[str, Any]:
    """The PROV-JSON document, its structure checked: every id in a declared prefix, every
    relation's ends declared, every attribute a literal or a list of literals; read back with the
    `prov` package too (the test extra's; no dependency of soma)."""
    text = path.read_text()
    doc = json.loads(text)
    prefixes = set(doc["prefix"]) | {"prov"}
    declared = {kind: set(doc.get(kind, {})) for kind in ("entity", "activity", "agent")}
    ends = {
        "prov:entity": "entity",
        "prov:activity": "activity",
        "prov:agent": "agent",
        "prov:collection": "entity",
        "prov:generatedEntity": "entity",
        "prov:usedEntity": "entity",
    }
    for kind, records in doc.items():
        if kind == "prefix":
            continue
        for id, attributes in records.items():
            assert id.startswith("_:") or id.split(":")[0] in prefixes, (kind, id)
            for key, value in attributes.items():
                assert key.split(":")[0] in prefixes, (kind, id, key)
                for one in value if isinstance(value, list) else [value]:
                    assert isinstance(one, (str, int, float, bool)), (kind, id, key, value)
                if key in ends:
                    assert value in declared[ends[key]], (kind, id, key, value)
    from prov.model import ProvDocument  # read back with the library (the test extra's)

    read = ProvDocument.deserialize(content=text, format="json")
    uri = f"urn:soma:report/{RUN}"
    (report,) = [r for r in read.get_records() if getattr(r.identifier, "uri", None) == uri]
    verdict = {str(k): v for k, v in report.attributes}["soma:verdict"]
    assert verdict == doc["entity"][REPORT]["soma:verdict"]
    return doc


def _crate(folder: Path) -> dict[str, dict[str, Any]]:
    """The crate's graph by id, checked: RO-Crate 1.1's context, the metadata descriptor, a
    root dataset conforming to the Workflow Run Crate (and Process Run Crate) profile with
    its main workflow, every local reference to an entity of the graph; with the files it
    names beside it."""
    value = json.loads((folder / "ro-crate-metadata.json").read_text())
    assert value["@context"] == "https://w3id.org/ro/crate/1.1/context"
    graph = {e["@id"]: e for e in value["@graph"]}
    assert len(graph) == len(value["@graph"]), "an @id given twice"
    descriptor = graph["ro-crate-metadata.json"]
    assert {"@id": RO_CRATE} in descriptor["conformsTo"]
    assert descriptor["about"] == {"@id": "./"}
    root = graph["./"]
    assert root["@type"] == "Dataset" and root["datePublished"]
    profiles = {p["@id"] for p in root["conformsTo"]}
    assert {"https://w3id.org/ro/wfrun/workflow/0.5", "https://w3id.org/ro/wfrun/process/0.5"} <= (
        profiles
    )
    assert all(graph[p]["@type"] == "CreativeWork" for p in profiles)
    assert "ComputationalWorkflow" in graph[root["mainEntity"]["@id"]]["@type"]
    actions = {m["@id"] for m in root["mentions"]}
    assert {graph[a]["@type"] for a in actions} == {"CreateAction"}
    assert {graph[a]["instrument"]["@id"] for a in actions} >= {root["mainEntity"]["@id"]}

    def references(value: Any):
        if isinstance(value, dict):
            if set(value) == {"@id"}:
                yield value["@id"]
            for v in value.values():
                yield from references(v)
        elif isinstance(value, list):
            for v in value:
                yield from references(v)

    for ref in references(value["@graph"]):
        assert ref in graph or ref.startswith(("http://schema.org/", RO_CRATE)), ref
    for part in root["hasPart"]:
        assert (folder / part["@id"]).is_file(), part
    from rocrate.rocrate import ROCrate  # read back with the library (the test extra's)

    read = ROCrate(str(folder))
    run = read.dereference("#run")
    assert run.type == "CreateAction"
    assert run["actionStatus"] == graph["#run"]["actionStatus"]["@id"]
    assert read.dereference("#verdict")["value"] == graph["#verdict"]["value"]
    assert read.mainEntity.id == root["mainEntity"]["@id"]
    return graph


def _status(graph: dict[str, dict[str, Any]]) -> str:
    return graph["#run"]["actionStatus"]["@id"].rsplit("/", 1)[-1]


# --- a clean run ------------------------------------------------------------------------------


def test_a_clean_audits_provenance_says_clean_naming_the_roster_charter_and_model(
    tmp_path, keys, copied, capsys
):
    assert _audit(copied, keys, tmp_path, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    doc = _prov(tmp_path / "audit.prov.json")
    said = doc["entity"][REPORT]
    assert said["soma:verdict"] == "clean"
    assert "soma:failed" not in said and "soma:failure" not in said
    found = layout.meetings(copied.bound(layout.rounds(RUN)), RUN)
    assert {said["soma:rosterDigest"]} == roster_digests(copied, RUN, found)
    assert said["soma:rosterSource"] == "given"
    assert said["soma:charter"] == copied.resolve(layout.charter(RUN))
    assert said["soma:model"] == report["model"] == report["rounds"][-1]["weights"]
    assert doc["entity"][f"blob:{report['model']}"]["prov:type"] == "soma:model"
    # the checks not made (without --rounds: the configured total; round 0's start), with why
    assert {"the run: rounds", "round 0: chain"} <= set(said["soma:unchecked"])
    unchecked = {
        e["prov:label"]: e for e in doc["entity"].values() if e.get("prov:type") == "soma:finding"
    }
    assert set(unchecked) == set(said["soma:unchecked"])
    assert {e["soma:outcome"] for e in unchecked.values()} == {"unchecked"}
    assert "the run signs it nowhere" in unchecked["the run: rounds"]["soma:detail"]
    assert unchecked["round 0: chain"]["soma:round"] == 0
    # the audit: an activity with its times and version, which used every average and
    # generated the report
    audit = doc["activity"][f"soma:audit/{RUN}"]
    assert audit["prov:label"] == "soma audit" and audit["soma:version"]
    assert audit["prov:startTime"] <= audit["prov:endTime"]
    used = {
        u["prov:entity"] for u in doc["used"].values() if u["prov:activity"] == f"soma:audit/{RUN}"
    }
    assert {f"blob:{r['average']}" for r in report["rounds"]} <= used
    assert {f"soma:roster/{said['soma:rosterDigest']}", f"blob:{said['soma:charter']}"} <= used
    generated = {(g["prov:entity"], g["prov:activity"]) for g in doc["wasGeneratedBy"].values()}
    assert (REPORT, f"soma:audit/{RUN}") in generated
    averagings = [a for a in doc["activity"].values() if a["prov:type"] == "soma:averaging"]
    assert [a["soma:outcome"] for a in averagings] == ["holds"] * ROUNDS
    assert all("soma:leftOut" not in a for a in averagings)
    # the crate: the run completed, its result the model; the audit's verdict clean
    graph = _crate(tmp_path / "crate")
    assert _status(graph) == "CompletedActionStatus" and "error" not in graph["#run"]
    assert graph["#run"]["result"] == [{"@id": "#model"}]
    assert graph["#model"]["value"] == report["model"]
    assert graph["#roster"]["value"] == said["soma:rosterDigest"]
    assert graph["#charter"]["value"] == said["soma:charter"]
    assert graph["#verdict"]["value"] == "clean"
    assert _status({"#run": graph["#audit"]}) == "CompletedActionStatus"
    assert {"#verdict", "prov.json", "audit.json"} <= {r["@id"] for r in graph["#audit"]["result"]}
    kept = json.loads((tmp_path / "crate" / "audit.json").read_text())
    assert kept == report
    # without --roster: read back from the store, and said so
    assert _audit(copied, None, tmp_path) == 0
    said = _prov(tmp_path / "audit.prov.json")["entity"][REPORT]
    assert said["soma:rosterSource"] == "store"
    assert said["soma:roster"] == "roster read from the store, not anchored"


# --- a failed audit ---------------------------------------------------------------------------

FAILED = {  # how: (tampering, the check that fails)
    "a replaced average": (_replace_the_average, "average"),
    "a drop-out signed by another client": (lambda s, m: _forge_a_drop_out(s, m, 1), "left-out"),
}


@pytest.mark.parametrize("how", list(FAILED))
def test_a_failed_audit_writes_provenance_and_a_crate_saying_failed(
    tmp_path, keys, copied, capsys, how
):
    tamper, check = FAILED[how]
    tamper(copied, _meeting(copied, keys))
    assert _audit(copied, keys, tmp_path) == 1
    refusal = capsys.readouterr().err.strip()
    doc = _prov(tmp_path / "audit.prov.json")
    said = doc["entity"][REPORT]
    assert said["soma:verdict"] == "failed"
    assert f"soma: {said['soma:failure']}" == refusal
    assert said["soma:failed"][0] == f"round {BROKEN}: {check}"
    (first, *_) = [
        e
        for e in doc["entity"].values()
        if e.get("prov:type") == "soma:finding" and e["soma:outcome"] == "broken"
    ]
    assert (first["soma:round"], first["soma:check"]) == (BROKEN, check)
    assert first["soma:detail"] in refusal
    members = {m["prov:entity"] for m in doc["hadMember"].values()}
    assert all(m["prov:collection"] == REPORT for m in doc["hadMember"].values())
    assert f"soma:finding/{RUN}/failed/0" in members
    (averaging,) = [
        a
        for a in doc["activity"].values()
        if a["prov:type"] == "soma:averaging" and a["soma:round"] == BROKEN
    ]
    assert averaging["soma:outcome"] == "broken"
    if check == "left-out":  # the forged drop-out: client 2 left out, and why it was said
        assert averaging["soma:leftOutClients"] == [2]
        assert averaging["soma:leftOut"] == ["client 2: failed: forged"]
        assert averaging["soma:tookPart"] == [0, 1]
    graph = _crate(tmp_path / "crate")
    assert _status(graph) == "FailedActionStatus"
    assert f"soma: {graph['#run']['error']}" == refusal
    assert graph["#verdict"]["value"] == "failed"
    assert graph["#failed-0"]["value"] == f"round {BROKEN}: {check}"
    assert graph["#failed-0"]["description"] == first["soma:detail"]
    assert {"@id": "#failed-0"} in graph["#audit"]["result"]
    prov_in_crate = json.loads((tmp_path / "crate" / "prov.json").read_text())
    assert prov_in_crate["entity"][REPORT]["soma:verdict"] == "failed"


def test_the_crate_of_a_report_is_deterministic_but_for_the_audits_times(tmp_path, keys, copied):
    from soma.audit import audit

    report = audit(copied, RUN, keys / "roster.json")
    one = crate.metadata(report, "2024-01-01T00:00:00+00:00", "2024-01-01T00:00:01+00:00")
    two = crate.metadata(report, "2024-01-01T00:00:00+00:00", "2024-01-01T00:00:01+00:00")
    assert one == two
    assert {e["@id"]: e for e in one["@graph"]}["#audit"]["endTime"] == "2024-01-01T00:00:01+00:00"
