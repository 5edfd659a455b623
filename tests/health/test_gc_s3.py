"""verify, repair and gc on a bucket (soma.health on soma.store.s3), on the tests' SeaweedFS.

Ages are the server's (LastModified against the Date of its answers); a test makes an
object old as test_health backdates a file, on the server (tests/s3_age.py), so that gc
runs with its real floor and grace.
"""

from __future__ import annotations

import json
import time

import pytest
import torch

pytest.importorskip("boto3", reason="boto3 (soma[s3]) is not installed")
pytest.importorskip("grpc", reason="grpcio (with tensorboard, soma[test]) ages objects")

from s3_age import age, age_upload  # noqa: E402
from s3_bucket import BUCKET  # noqa: E402
from test_health import federated_run  # noqa: E402

from soma import health  # noqa: E402
from soma.cli import main as soma  # noqa: E402
from soma.health import collecting  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.store.backend import BackendStore  # noqa: E402

HOUR = 3600.0
_PREFIXES = iter(range(10**6))


@pytest.fixture
def store(bucket: str) -> BackendStore:
    made = Store(f"s3://{BUCKET}/gc{next(_PREFIXES)}")
    assert isinstance(made, BackendStore)
    return made


def _key(store: BackendStore, digest: str) -> str:
    return f"{store.backend.prefix}blobs/{digest[:2]}/{digest}"


def _age_all(store: BackendStore, seconds: float) -> None:
    for key, _, _ in store.backend.blobs():
        age(f"{store.backend.prefix}blobs/{key}", seconds)


def test_gc_on_a_bucket_removes_old_garbage_past_the_grace_keeps_the_young_and_the_reached(
    store: BackendStore, capsys: pytest.CaptureFixture[str]
) -> None:
    records = federated_run(store, rounds=2, clients=2)
    federated_run(store, "dropped", rounds=1, clients=2, strategy="fedavg")
    garbage = store.put_value({"killed": "before its bind", "w": torch.ones(10)})
    _age_all(store, 2 * HOUR)
    young = store.put(b"put a second ago, bound soon")
    url, keep = store.backend.url, ["--keep-runs", "ctl"]
    assert soma(["gc", "--store", url, *keep, "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["blobs_removed"] >= 2 and store.has(garbage), "a dry run removes nothing"
    assert dry["names_removed"] and store.bound("dropped/") == dry["names_removed"]
    assert soma(["gc", "--store", url, *keep, "--json"]) == 0  # the default grace, 1 h
    report = json.loads(capsys.readouterr().out)
    assert report["blobs_removed"] == dry["blobs_removed"] and not store.has(garbage), report
    assert store.has(young) and report["kept_young"] == 1 and store.bound("dropped/") == []
    for record in records:  # reached only as text inside the average records
        assert store.recall_digest(record["weights"]) and store.recall_digest(record["state"])
    after = health.verify(store)
    assert after.clean and after.unreachable == 1, after.lines()  # the young one
    assert health.gc(store, min_age=HOUR).blobs_removed == 0


def test_a_blob_put_again_before_gc_is_refreshed_by_the_servers_clock_and_kept(
    store: BackendStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    again, garbage = store.put(b"put again"), store.put(b"garbage")
    for digest in (again, garbage):
        age(_key(store, digest), 2 * HOUR)
    other_site = Store(store.backend.url)  # another writer, its own client
    assert other_site.put(b"put again") == again
    head = store.backend.client.head_object(Bucket=BUCKET, Key=_key(store, again))
    assert head["ResponseMetadata"]["HTTPHeaders"]["date"], "the server's clock"
    ahead = type("Clock", (), {"time": lambda: time.time() + 86400, "monotonic": time.monotonic})
    monkeypatch.setattr(collecting, "time", ahead)  # this site's clock, a day ahead: not used
    report = health.gc(store, min_age=HOUR)
    assert store.has(again) and not store.has(garbage), report.lines()
    assert report.blobs_removed == 1 and report.kept_young == 1


def test_a_refresh_between_gcs_look_and_its_delete_puts_the_blob_back(
    store: BackendStore,
) -> None:
    """The race: gc has found the blob old, a writer's put refreshes it (it believes the
    blob is there and binds it), then gc deletes it: gc finds the writer's marker after
    its delete and puts the blob back."""
    digest = store.put(b"about to be named")
    age(_key(store, digest), 2 * HOUR)
    writer, collector = Store(store.backend.url), Store(store.backend.url)
    landed = []

    def put_first(params: dict, **_: object) -> None:
        if params.get("Key") == _key(store, digest) and not landed:
            landed.append(writer.put(b"about to be named"))

    collector.backend.client.meta.events.register(
        "before-parameter-build.s3.DeleteObject", put_first
    )
    report = health.gc(collector, min_age=HOUR)
    assert landed == [digest], "the writer's put ran between gc's look and its delete"
    writer.bind("run/named", digest)
    assert store.get(store.resolve("run/named")) == b"about to be named", report.lines()
    assert report.blobs_removed == 0 and report.raced == 1
    assert not list(store.backend._listed(f"{store.backend.prefix}attic/")), "attic emptied"


def test_an_abandoned_multipart_upload_is_aborted_and_a_live_one_kept(
    store: BackendStore,
) -> None:
    client, key = store.backend.client, f"{store.backend.prefix}blobs/ab/{'ab' * 32}"
    uploads = []
    for _ in range(2):
        upload = client.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
        client.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=b"x")
        uploads.append(upload)
    age_upload(uploads[0], 2 * HOUR)  # a killed writer's
    assert health.gc(store, dry_run=True, min_age=HOUR).uploads_aborted == 1
    report = health.gc(store, min_age=HOUR)
    assert report.uploads_aborted == 1 and report.temporaries_kept == 1, report.lines()
    assert any("aborted 1 multipart upload" in line for line in report.lines())
    left = client.list_multipart_uploads(Bucket=BUCKET, Prefix=store.backend.prefix)
    assert [u["UploadId"] for u in left.get("Uploads", [])] == [uploads[1]]
    client.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=uploads[1])


def test_soma_verify_finds_a_missing_blob_on_a_bucket_and_soma_repair_rebuilds_it(
    store: BackendStore, capsys: pytest.CaptureFixture[str]
) -> None:
    records = federated_run(store, rounds=2, clients=2)
    victim = records[1]["weights"]
    original = store.get(victim)
    assert store.backend.delete_blob(victim)
    url = store.backend.url
    assert soma(["verify", "--store", url, "--json"]) == 1
    (problem,) = json.loads(capsys.readouterr().out)["problems"]
    assert problem["kind"] == "missing" and problem["digest"] == victim
    assert "soma repair" in problem["fix"]
    assert soma(["repair", "--store", url]) == 0, capsys.readouterr()
    assert "round 1 of run 'ctl'" in capsys.readouterr().out
    assert store.get(victim) == original
    assert soma(["verify", "--store", url]) == 0


def test_a_blob_a_killed_gc_left_in_the_attic_stays_readable_and_the_next_gc_puts_it_back(
    store: BackendStore,
) -> None:
    digest = store.put(b"named, its gc killed midway")
    store.bind("run/named", digest)
    client, key = store.backend.client, _key(store, digest)
    attic = f"{store.backend.prefix}attic/{digest}"
    client.copy_object(Bucket=BUCKET, Key=attic, CopySource={"Bucket": BUCKET, "Key": key})
    client.delete_object(Bucket=BUCKET, Key=key)  # where a killed gc stops
    assert store.has(digest) and store.get(digest) == b"named, its gc killed midway"
    report = health.gc(store, min_age=HOUR)
    assert report.restored == 1 and report.blobs_removed == 0, report.lines()
    assert [k for k, _, _ in store.backend.blobs()] == [f"{digest[:2]}/{digest}"]
    assert not list(store.backend._listed(f"{store.backend.prefix}attic/"))
