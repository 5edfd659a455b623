"""soma audit: a run checked round by round from its store alone, read-only; it passes a clean
signed run (folder and bucket) and fails naming the round after each kind of tampering."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from signed_runs import CLIENTS, RUN, make_keys_and_roster  # noqa: E402

from soma.audit import audit  # noqa: E402
from soma.audit import rounds as audit_rounds  # noqa: E402
from soma.audit.findings import RoundAudit  # noqa: E402
from soma.cli import main  # noqa: E402
from soma.health.rebuild import recompute_average  # noqa: E402
from soma.round import Meeting, layout, records  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.round.signing import Signing, read_roster  # noqa: E402
from soma.round.verify import meeting_from_about  # noqa: E402
from soma.run.simulate import simulate  # noqa: E402
from soma.store import Store, codecs  # noqa: E402

ROUNDS = 3


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    make_keys_and_roster(folder)
    return folder


def _signed_run(keys: Path, store: str | Path) -> None:
    simulate("soma.tasks.control", clients=CLIENTS, rounds=ROUNDS, roster=keys / "roster.json",
             keys=str(keys / "{client}.key"), store=store, deadline=30)  # fmt: skip


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


def _folder_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] in ("names", "blobs")
    }


def _audit(store: Path | str, keys: Path | None, *more: str) -> int:
    roster = [] if keys is None else ["--roster", str(keys / "roster.json")]
    return main(["audit", "--store", str(store), "--run", RUN, *roster, *more])


# --- a clean run ----------------------------------------------------------------------------


def test_a_clean_signed_run_passes_and_the_store_is_byte_identical_after(
    tmp_path, keys, copied, capsys
):
    root = Path(copied.directory)
    before = _folder_bytes(root)
    prov = tmp_path / "prov.json"
    assert _audit(root, keys, "--json", "--prov", str(prov)) == 0
    report = json.loads(capsys.readouterr().out)
    assert _folder_bytes(root) == before, "the audit wrote into the store"
    assert report["clean"] and report["roster"].startswith("given")
    charter = Store(root).resolve(f"{RUN}/charter")
    assert {"check": "charter", "outcome": "holds"}.items() <= next(
        f for f in report["findings"] if f["check"] == "charter"
    ).items() and charter in json.dumps(report), "the run's charter, named"
    assert [r["round"] for r in report["rounds"]] == list(range(ROUNDS))
    for r in report["rounds"]:
        outcomes = {(f["check"], f["outcome"]) for f in r["findings"]}
        for check in ("signature", "blobs", "average", "participation"):
            assert (check, "holds") in outcomes, (r["round"], check)
        assert r["took_part"] == list(range(CLIENTS)) and r["signer"] is not None
    assert ("chain", "holds") in {
        (f["check"], f["outcome"]) for f in report["rounds"][-1]["findings"]
    }
    doc = json.loads(prov.read_text())
    model = report["model"]
    assert doc["entity"][f"blob:{model}"]["prov:type"] == "soma:model"
    contributions = [e for e in doc["entity"].values() if e["prov:type"] == "soma:contribution"]
    assert len(contributions) == CLIENTS * ROUNDS
    averagings = [k for k, a in doc["activity"].items() if a["prov:type"] == "soma:averaging"]
    generated = [g for g in doc["wasGeneratedBy"].values() if g["prov:activity"] in averagings]
    assert len(averagings) == ROUNDS and len(generated) == 2 * ROUNDS
    assert {a["prov:agent"] for a in doc["wasAttributedTo"].values()} >= {
        f"soma:client/{k}" for k in range(CLIENTS)
    }
    assert _audit(root, keys, "--json") == 0
    assert json.loads(capsys.readouterr().out) == report, "--json is deterministic"


def test_without_a_roster_it_is_read_from_the_store_and_labelled_not_anchored(copied):
    report = audit(copied, RUN)
    assert report.clean and report.roster == "roster read from the store, not anchored"
    unsigned = Store(Path(copied.directory).parent / "unsigned")
    simulate("soma.tasks.control", clients=CLIENTS, rounds=1, store=unsigned.directory, deadline=30)
    report = audit(unsigned, RUN)
    assert report.clean and report.roster.startswith("no roster: the run is unsigned")


def test_a_clean_signed_run_on_a_bucket_passes_and_the_bucket_is_unchanged(bucket, keys, capsys):
    import boto3
    from s3_bucket import BUCKET

    prefix = f"audit-{os.getpid()}"
    _signed_run(keys, f"s3://{BUCKET}/{prefix}")
    s3 = boto3.client("s3")

    def objects() -> dict[str, bytes]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        keys_ = [o["Key"] for page in pages for o in page.get("Contents", [])]
        return {k: s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in sorted(keys_)}

    before = objects()
    assert _audit(f"s3://{BUCKET}/{prefix}", keys) == 0
    out = capsys.readouterr().out
    assert "every check held" in out and objects() == before


# --- tampering, each named by its round ------------------------------------------------------

BROKEN = 1  # the round every tampering below breaks (round 2 starts from it, and is printed)


def _meeting(store: Store, keys: Path, r: int = BROKEN, averagers=None) -> Meeting:
    (key,) = [k for rr, k in layout.meetings(store.bound(layout.rounds(RUN)), RUN) if rr == r]
    roster = read_roster(keys / "roster.json")
    forger = Signing.of(roster, str(keys / "{client}.key"), averagers)
    return meeting_from_about(store, RUN, r, key, forger)


def _flip_a_byte(store: Store, meeting: Meeting) -> None:
    record = records.read_client(store, store.resolve(meeting.client(1)), client=1, name="")
    tree, _ = codecs.parse_record(store.get(record.weights), record.weights)
    blob = Path(store.blob_path(next(codecs.references(tree))))
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0x01
    blob.write_bytes(bytes(data))


def _replace_the_average(store: Store, meeting: Meeting, by: int = 0) -> None:
    """A roster member (client `by`) signs an average of its own: other weights, same shape."""
    import torch

    value = dict(store.recall(meeting.average))
    value.pop(signatures.SIGNED)
    weights = store.recall_digest(value["weights"])
    garbage = {n: {k: torch.full_like(t, 7.0) for k, t in m.items()} for n, m in weights.items()}
    value["weights"] = store.put_value(garbage)
    digest = signatures.put(store, meeting.signing, value, name=meeting.average, by=by)
    store.bind(meeting.average, digest)


def _forge_a_drop_out(store: Store, meeting: Meeting, signer: int | None) -> None:
    """Client 2 dropped out, says a record it did not sign (unsigned, or signed by client 1),
    and an average of clients 0 and 1 that a roster member (client 0) computed and signed."""
    name = meeting.client(2)
    drop = records.DropRecord(2, "failed: forged").value()
    if signer is None:
        store.bind(name, store.put_value(drop))
    else:
        store.bind(name, signatures.put(store, meeting.signing, drop, name=name, by=signer))
    value = dict(store.recall(meeting.average))
    value.pop(signatures.SIGNED)
    value["inputs"] = [i for i in value["inputs"] if i["client"] != 2]
    value["left_out"] = [{"client": 2, "why": "failed: forged"}]
    value["weights"], value["state"] = recompute_average(store, value)
    digest = signatures.put(store, meeting.signing, value, name=meeting.average, by=0)
    store.bind(meeting.average, digest)


TAMPERING = {  # how: (tampering, the check that finds it, what the refusal names)
    "a flipped byte in a contribution's blob": (_flip_a_byte, "blobs", "client 1's contribution"),
    "a replaced average": (_replace_the_average, "average", ""),
    "a client record's name unbound": (
        lambda s, m: s.forget(m.client(1)),
        "blobs",
        "client 1's record",
    ),
    "a client record's blob deleted": (
        lambda s, m: Path(s.blob_path(s.resolve(m.client(1)))).unlink(),
        "blobs",
        "client 1's contribution",
    ),
    "an unsigned drop-out": (
        lambda s, m: _forge_a_drop_out(s, m, None),
        "left-out",
        "client 2's drop-out",
    ),
    "a drop-out signed by another client": (
        lambda s, m: _forge_a_drop_out(s, m, 1),
        "left-out",
        "client 2's drop-out",
    ),
}


@pytest.mark.parametrize("how", list(TAMPERING))
def test_tampering_fails_the_audit_naming_the_round(keys, copied, capsys, how):
    tamper, check, named = TAMPERING[how]
    tamper(copied, _meeting(copied, keys))
    assert _audit(copied.directory, keys) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"soma: audit: round {BROKEN} of run {RUN!r}: "), line
    assert named in line, line
    assert "Traceback" not in captured.err
    assert f"round {ROUNDS - 1} (meeting" in captured.out, "the full report is printed first"
    r, finding = audit(copied, RUN, keys / "roster.json").first_broken()
    assert (r, finding.check) == (BROKEN, check), finding


def test_a_round_with_no_average_before_it_breaks_the_chain(keys, copied):
    copied.forget(_meeting(copied, keys).average)
    failure = audit(copied, RUN, keys / "roster.json").failure()
    assert failure is not None
    assert str(failure).startswith(f"audit: round {BROKEN + 1} of run {RUN!r}: ")
    assert f"round {BROKEN} has no average" in str(failure)


def test_a_sample_the_public_seed_does_not_draw_is_broken():
    from soma.config.participation import sampled

    drawn = sampled(0, 4, 10, 3)
    other = tuple(k for k in range(10) if k not in drawn)[:3]
    for expected, ok in ((tuple(drawn), True), (other, False)):
        meeting = Meeting(RUN, 4, 10, expected=expected, config={"seed": 0})
        audited = RoundAudit(4, meeting.key)
        audit_rounds._participation(meeting, audited)
        (finding,) = audited.findings
        assert finding.ok is ok, finding
    assert f"seed 0 draws {drawn}" in finding.detail


# --- differential privacy: the ledger -----------------------------------------------------------


def test_a_dp_runs_epsilon_is_recomputed_and_a_lowered_one_is_named(tmp_path):
    store = Store(tmp_path / "dp")
    dp = {"clip": 1.0, "noise_multiplier": 1.0}
    simulate("soma.tasks.control", clients=CLIENTS, rounds=2, store=store.directory, deadline=30,
             strategy="dp_fedavg", strategy_options=dp)  # fmt: skip
    report = audit(store, RUN)
    assert report.clean
    privacy = [f for r in report.rounds for f in r.findings if f.check == "privacy"]
    assert [f.ok for f in privacy] == [True, True]
    (key,) = [k for r, k in layout.meetings(store.bound(layout.rounds(RUN)), RUN) if r == 0]
    name = layout.average(layout.meeting(RUN, 0, key))
    value = dict(store.recall(name))
    state = dict(store.recall_digest(value["state"]))
    state["epsilon"] = state["epsilon"] / 2
    value["state"] = store.put_value(state)
    store.bind(name, store.put_value(value))
    failure = audit(store, RUN).failure()
    assert failure is not None
    assert str(failure).startswith(f"audit: round 0 of run {RUN!r}: its state reports epsilon")
