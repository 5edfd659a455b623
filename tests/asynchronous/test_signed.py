"""A signed asynchronous run (soma.asynchronous.signed): `--roster` with `--buffer`, updates
signed by their clients and versions by the run's averagers; a forged version (a non-member's
key, a member outside the averagers, no signature) or a forged update fails `soma audit`
naming the version and the client, and the client that would train from it refuses it
first; a corrupt update blob is said per version and client with advice that can work."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from figures import FIGURES, printed
from helpers import soma, soma_processes

from soma.asynchronous import signed
from soma.asynchronous.clients import run_clients
from soma.asynchronous.exported import export_version
from soma.asynchronous.versions import VersionError, Versions, step_of
from soma.audit import audit
from soma.config.asynchronous import Buffered
from soma.config.spec import RunSpec
from soma.round import layout
from soma.round import signing as signatures
from soma.run import checked
from soma.store import Store, codecs
from soma.timing import Timing

RUN = "a"
AVERAGERS = (0,)
# One process hosts every client and makes each version itself, so it never waits for one;
# a broken variant that stalls the run (no update pending it will take) ends here, not at
# the default deadline.
WAITED = 60.0
ROW = "forged async records"  # docs/benchmarks/faults.md's row: each forgery, each detected


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    yield
    printed(request, [ROW])


def _counted(detected: bool) -> None:
    FIGURES[ROW]["trials"] += 1
    FIGURES[ROW]["faults"] += 1
    FIGURES[ROW]["detected"] += detected


def _spec(keys: Path, versions: int = 3, mine: tuple[int, ...] = (0, 1, 2)) -> RunSpec:
    return RunSpec(
        run=RUN, task="soma.tasks.control", clients=3, rounds=versions, mine=mine,
        given="library", asynchronous={"buffer": 2}, task_options={"examples": 64},
        roster=str(keys / "roster.json"), keys=str(keys / "{client}.key"), averagers=AVERAGERS,
        timing=Timing(deadline=WAITED),
    )  # fmt: skip


@pytest.fixture(scope="module")
def made(keys: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A signed buffered run of three versions (buffer 2, client 0 the one averager), made
    once a module; each test works on its own copy (`_copy`)."""
    spec = _spec(keys)
    task, strategy = checked.checked(spec)
    folder = tmp_path_factory.mktemp("signed-async") / "store"
    run_clients(spec, Store(folder), task, strategy)
    return folder


def _copy(made: Path, tmp_path: Path) -> Store:
    shutil.copytree(made, tmp_path / "store")
    return Store(tmp_path / "store")


def _signing(keys: Path) -> signatures.Signing:
    """The roster with every client's key: the test plays each member, honest or rogue."""
    roster = signatures.read_roster(keys / "roster.json")
    return signatures.Signing.of(roster, str(keys / "{client}.key"), AVERAGERS)


def _audited(store: Store, keys: Path):
    return audit(store, RUN, keys / "roster.json", AVERAGERS)


def _version(store: Store, v: int) -> dict:
    value = dict(store.recall(signed.version_name(RUN, v)))
    value.pop(signatures.SIGNED, None)
    return value


def _outsider(store: Store, keys: Path, value: dict, name: str, tmp_path: Path) -> dict:
    """`value` signed for `name` and this run's charter with a key on no roster."""
    from cryptography.hazmat.primitives import serialization

    path, public = signatures.make_keys(tmp_path / "outsider", 9)
    private = serialization.load_pem_private_key(path.read_bytes(), password=None)
    charter = signatures.run_value(store, _signing(keys), name, by=None)
    message = signatures._message(name, *signatures._tree(store, value), charter)
    return {**value, signatures.SIGNED: {"key": public, "signature": private.sign(message).hex()}}


def _bind_version(store: Store, v: int, value: dict) -> None:
    store.bind(signed.version_name(RUN, v), store.put_value(value))


def test_a_signed_buffered_run_audits_clean_with_the_roster_given_or_read_back(
    made, keys, tmp_path
) -> None:
    store = _copy(made, tmp_path)
    for report in (_audited(store, keys), audit(store, RUN, averagers=AVERAGERS)):
        assert report.clean, report.failure()
        assert report.roster_digest == _signing(keys).digest
        assert [r.signer for r in report.rounds] == [0, 0, 0, 0]
        signatures_held = [f for r in report.rounds for f in r.findings if f.check == "signature"]
        assert len(signatures_held) == 4 and all(f.ok for f in signatures_held)
        assert any(f.check == "charter" and f.ok for f in report.findings)
    for name in store.bound(layout.updates(RUN)):
        k = layout.update_of(name, RUN)[1]
        signed.check_update(store, _signing(keys), store.resolve(name), name=name, client=k)
    assert (
        export_version(store, RUN, tmp_path / "m.safetensors", averagers=AVERAGERS)["version"] == 3
    )


def test_an_update_is_signed_by_its_client_and_a_version_by_an_averager(keys, tmp_path) -> None:
    store, signing = Store(tmp_path), _signing(keys)
    versions = Versions(store, "b", Buffered(1), 1, signing, (2, 1, 0))
    start = {"fc": {"w": torch.zeros(3)}}
    versions.begin(store.put_value(start), deadline=None)
    name = versions.contribute(1, 0, {"fc": {"w": torch.ones(3)}}, 4.0)
    signed.check_update(store, signing, store.resolve(name), name=name, client=1)
    assert versions.advance(deadline=WAITED, lease=60.0) == 1
    for v in (0, 1):  # client 0, the one averager, signs: this process holds every key
        digest = store.resolve(signed.version_name("b", v))
        assert signed.check_signer(store, signing, "b", v, digest) == 0


@pytest.mark.parametrize("signer", ["outsider", "member", "nobody"])
def test_a_forged_version_fails_the_audit_and_the_client_refuses_to_train_from_it(
    made, keys, tmp_path, signer
) -> None:
    """Version 3 rewritten as it was, its signature another's: a key on no roster, client 1's
    (a member, not an averager), or none."""
    store = _copy(made, tmp_path)
    value, name = _version(store, 3), signed.version_name(RUN, 3)
    if signer == "outsider":
        value = _outsider(store, keys, value, name, tmp_path)
    elif signer == "member":
        value = signatures.signed(store, _signing(keys), value, name=name, by=1)
    _bind_version(store, 3, value)
    said = {
        "outsider": "is signed by key",
        "member": "is signed by client 1, who is not among the run's averagers [0]",
        "nobody": "is unsigned",
    }[signer]
    report = _audited(store, keys)
    _counted(not report.clean)
    failure = str(report.failure())
    assert failure.startswith("audit: round 3 of run 'a': version 3: version 3 of asynchronous")
    assert said in failure and "clients [1, 2]" in failure
    (finding,) = [f for _, f in report.failed()]
    assert finding.check == "signature" and finding.client == (1 if signer == "member" else None)
    with pytest.raises(VersionError, match="version 3 does not replay"):
        export_version(store, RUN, tmp_path / "m.safetensors", averagers=AVERAGERS)
    spec = _spec(keys, versions=4)
    task, strategy = checked.checked(spec)
    refused = f"version 3 of asynchronous run 'a'.*{re.escape(said)}"
    with pytest.raises(signatures.SigningError, match=refused):
        run_clients(spec, store, task, strategy)
    assert not [
        n for n in store.bound(layout.updates(RUN)) if n.startswith(f"{RUN}/async/update/3/")
    ]


def _forge_update(store: Store, keys: Path, v: int, client: int) -> None:
    """A rogue averager (client 0, whose key signs versions) remakes version v with client
    `client`'s update replaced by an unsigned one of other weights, the step recomputed."""
    value = _version(store, v)
    (entry,) = [e for e in value["consumed"] if e["client"] == client]
    update = dict(store.recall_digest(entry["record"]))
    update.pop(signatures.SIGNED)
    weights = store.recall_digest(update["weights"])
    update["weights"] = store.put_value(
        {n: {k: torch.zeros_like(t) for k, t in m.items()} for n, m in weights.items()}
    )
    record = store.put_value(update)
    store.bind(entry["update"], record)
    entry.update(record=record, weights=update["weights"])
    versions = Versions(store, RUN, Buffered(2))
    weights = step_of(
        versions.weights(v - 1), value["consumed"], v - 1, store.recall_digest,
        versions.weights, 1.0,
    )  # fmt: skip
    value["weights"] = store.put_value(weights)
    name = signed.version_name(RUN, v)
    _bind_version(store, v, signatures.signed(store, _signing(keys), value, name=name, by=0))


def test_a_forged_update_fails_the_audit_naming_its_version_and_client(
    made, keys, tmp_path
) -> None:
    store = _copy(made, tmp_path)
    _forge_update(store, keys, 3, client=2)
    report = _audited(store, keys)
    _counted(not report.clean)
    failed = report.failed()
    assert [(r, f.check, f.client) for r, f in failed] == [(3, "signature", 2)]
    assert str(report.failure()).startswith(
        "audit: round 3 of run 'a': version 3: version 3 of asynchronous run 'a': client 2's "
        "update ('a/async/update/2/2', record"
    )
    assert "is unsigned" in str(report.failure())
    reader = Versions(store, RUN, Buffered(2), signing=_signing(keys))
    with pytest.raises(signatures.SigningError, match="version 3 .* client 2's update"):
        reader.record(3)


def _flip_a_byte(store: Store, digest: str) -> Path:
    tree, _ = codecs.parse_record(store.get(digest), digest)
    blob = Path(store.blob_path(next(codecs.references(tree))))
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0x01
    blob.write_bytes(bytes(data))
    return blob


def test_a_corrupt_update_blob_is_said_per_version_and_client_with_advice_that_works(
    made, keys, tmp_path
) -> None:
    store = _copy(made, tmp_path)
    (entry,) = [e for e in _version(store, 2)["consumed"] if e["client"] == 2]
    blob = _flip_a_byte(store, entry["weights"])
    report = _audited(store, keys)  # it does not stop at the blob: it says where it is
    _counted(not report.clean)
    failed = report.failed()
    assert [(r, f.check, f.client) for r, f in failed] == [(2, "blobs", 2)]
    detail = failed[0][1].detail
    assert detail.startswith("version 2: client 2's update 'a/async/update/1/2' (trained from")
    assert f"blob {blob} is corrupt" in detail
    assert "restore the blob from a backup" in detail and "soma repair --store" not in detail


def test_a_pending_update_its_client_did_not_sign_is_refused_by_the_next_version(
    made, keys, tmp_path
) -> None:
    """An unsigned update planted under client 0's name from version 2 (older than any
    pending, so it would be consumed first): version 4 refuses it as forged, names it, and
    the run audits clean (the refusal checked: its signature indeed does not hold)."""
    store = _copy(made, tmp_path)
    planted = dict(store.recall(layout.update(RUN, 2, 1)))
    planted.pop(signatures.SIGNED)
    planted["client"] = 0
    store.bind(layout.update(RUN, 2, 0), store.put_value(planted))
    spec = _spec(keys, versions=4)
    task, strategy = checked.checked(spec)
    assert run_clients(spec, store, task, strategy).latest == 4
    record = _version(store, 4)
    _counted(any(e.get(signed.FORGED) is True for e in record["refused"]))
    assert [(e["client"], e["from"]) for e in record["consumed"]] == [(0, 3), (1, 3)]
    (refused,) = record["refused"]
    assert refused["update"] == layout.update(RUN, 2, 0) and refused[signed.FORGED] is True
    assert "its signature does not hold" in refused["why"] and "unsigned" in refused["why"]
    report = _audited(store, keys)
    assert report.clean, report.failure()


def test_a_clients_own_update_taken_by_a_record_it_did_not_sign_is_refused_by_name(
    made, keys, tmp_path
) -> None:
    store = _copy(made, tmp_path)
    planted = dict(store.recall(layout.update(RUN, 2, 1)))
    planted.pop(signatures.SIGNED)
    planted.update(client=0, **{"from": 3})
    store.bind(layout.update(RUN, 3, 0), store.put_value(planted))
    spec = _spec(keys, versions=4, mine=(0,))
    task, strategy = checked.checked(spec)
    with pytest.raises(VersionError, match="client 0's update from version 3 .* did not sign"):
        run_clients(spec, store, task, strategy)


def test_a_process_holding_no_averagers_key_leaves_the_version_to_one_that_does(
    made, keys, tmp_path
) -> None:
    store = _copy(made, tmp_path)
    theirs = tmp_path / "theirs"  # clients 1 and 2's keys only: no averager's
    theirs.mkdir(mode=0o700)
    for k in (1, 2):
        shutil.copy2(keys / f"{k}.key", theirs / f"{k}.key")
    roster = signatures.read_roster(keys / "roster.json")
    signing = signatures.Signing.of(roster, str(theirs / "{client}.key"), AVERAGERS)
    versions = Versions(store, RUN, Buffered(2), 4, signing, (1, 2))
    for k in (1, 2):
        versions.contribute(k, 3, dict(versions.weights(3)), 4.0)
    assert versions.advance(deadline=WAITED, lease=60.0) == 3  # two pending: not made here
    assert store.resolve(signed.version_name(RUN, 4)) is None
    averager = Versions(store, RUN, Buffered(2), 4, _signing(keys), (0,))
    assert averager.advance(deadline=WAITED, lease=60.0) == 4
    assert (
        signed.check_signer(store, signing, RUN, 4, store.resolve(signed.version_name(RUN, 4))) == 0
    )


def test_a_signed_asynchronous_run_is_no_longer_refused(keys) -> None:
    spec = _spec(keys)
    spec.check()
    assert spec.buffered() == Buffered(2) and spec.signing is not None


def test_soma_simulate_with_roster_and_buffer_audits_and_a_forged_version_fails(
    keys, tmp_path
) -> None:
    """The command line end to end: `soma simulate --buffer --roster`, `soma audit` clean;
    version 2 rewritten unsigned: `soma audit` exits 1 naming it, `soma status --roster`
    says so on its line, `soma export` refuses it."""
    store = tmp_path / "store"
    ran = soma(
        "simulate", "--store", str(store), "--run", RUN, "--task", "soma.tasks.control",
        "--option", "examples=64", "--clients", "3", "--rounds", "3", "--buffer", "2",
        "--roster", str(keys / "roster.json"), "--keys", str(keys / "{client}.key"),
        "--averagers", "0",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1])["versions"] == 3
    reading = ("--store", str(store), "--run", RUN, "--roster", str(keys / "roster.json"))
    clean = soma("audit", *reading, "--averagers", "0")
    assert clean.returncode == 0, clean.stderr
    opened = Store(store)
    _bind_version(opened, 2, _version(opened, 2))
    forged = soma("audit", *reading, "--averagers", "0")
    assert forged.returncode == 1
    assert "soma: audit: round 2 of run 'a': version 2: version 2 of asynchronous run 'a'" in (
        forged.stderr
    )
    assert "is unsigned" in forged.stderr and "clients [" in forged.stderr
    shown = soma("status", *reading, "--averagers", "0")
    assert shown.returncode == 1 and "DOES NOT HOLD: version 2 of asynchronous" in shown.stdout
    exported = soma("export", *reading, "--averagers", "0", "--output",
                    str(tmp_path / "m.safetensors"))  # fmt: skip
    assert exported.returncode == 1 and "version 2 does not replay" in exported.stderr


def test_soma_client_processes_with_roster_and_buffer_leave_a_signed_run(keys, tmp_path) -> None:
    """Two `soma client --buffer --roster` processes, client 0 (the averager) in one and
    clients 1 and 2 in the other: every version signed by client 0, every update by its own
    client, and the run audits clean against the roster."""
    store = tmp_path / "store"
    args = [
        "client", "--store", str(store), "--run", RUN, "--rounds", "4", "--clients", "3",
        "--task", "soma.tasks.control", "--option", "examples=64", "--buffer", "2",
        "--deadline", "120", "--roster", str(keys / "roster.json"),
        "--keys", str(keys / "{client}.key"), "--averagers", "0",
    ]  # fmt: skip
    lines = soma_processes(args, ["0", "1,2"], timeout=300, every_line=True)
    assert [said[-1]["versions"] for said in lines] == [4, 4]
    report = _audited(Store(store), keys)
    assert report.clean, report.failure()
    assert [r.signer for r in report.rounds] == [0] * 5
