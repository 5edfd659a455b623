"""The store on a real S3 server (`Store("s3://bucket/prefix")`, soma.store.s3.backend).

The server is SeaweedFS on 127.0.0.1, one for the test session (tests/s3_bucket.py: the
`bucket` fixture); skipped, with the reason, only where its `weed` binary cannot run.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("boto3", reason="boto3 (soma[s3]) is not installed")

import boto3  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402
from s3_bucket import BUCKET  # noqa: E402

import soma.store.backend as backend  # noqa: E402
import soma.store.read_cache as recent  # noqa: E402
import soma.store.s3.backend as s3  # noqa: E402
import soma.store.s3.reads as s3_reads  # noqa: E402
import soma.store.s3.requests as s3_requests  # noqa: E402
from soma.cli import main as soma  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.store.backend import BackendStore  # noqa: E402
from soma.store.errors import BadStore, CorruptBlob, StoreError, UnknownDigest  # noqa: E402
from soma.store.folder import FolderStore  # noqa: E402
from soma.timing import LEASE  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


_PREFIXES = iter(range(10**6))


@pytest.fixture
def store(bucket: str) -> BackendStore:
    """A store under a prefix of its own in the module's bucket."""
    made = Store(f"s3://{BUCKET}/t{next(_PREFIXES)}")
    assert isinstance(made, BackendStore) and isinstance(made, Store)  # one store type
    return made


# --- the server itself -------------------------------------------------------------------


@pytest.mark.parametrize("condition", ["If-None-Match", "If-Match"])
def test_the_servers_conditional_put_is_atomic_one_winner_of_eight_in_every_trial(
    bucket: str, condition: str
) -> None:
    """What every claim (If-None-Match: *) and every lease's renewal and takeover (If-Match:
    <ETag>, compare-and-swap) on S3 rest on, checked on the server the tests use."""
    clients = [boto3.client("s3") for _ in range(8)]
    for trial in range(20 if condition == "If-None-Match" else 10):  # ~1 s a trial here
        key, start = f"race/{condition}/{trial}", threading.Barrier(8)
        told: list[object] = [None] * 8
        asked = {"IfNoneMatch": "*"}
        if condition == "If-Match":  # all swap from the one tag they saw
            asked = {"IfMatch": clients[0].put_object(Bucket=BUCKET, Key=key, Body=b"0")["ETag"]}

        def racer(
            i: int, key: str, start: threading.Barrier, told: list[object], asked: dict
        ) -> None:
            start.wait()
            try:
                clients[i].put_object(Bucket=BUCKET, Key=key, Body=f"racer {i}".encode(), **asked)
                told[i] = True
            except ClientError as error:
                told[i] = error.response["ResponseMetadata"]["HTTPStatusCode"]

        threads = [
            threading.Thread(target=racer, args=(i, key, start, told, asked)) for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for i in range(8) if told[i] is True]
        assert len(winners) == 1, f"{bucket}, {condition}, trial {trial}: {told}"
        assert set(told) - {True} <= {412, 409}, told
        body = clients[0].get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert body == f"racer {winners[0]}".encode(), f"trial {trial}: stored {body!r}"


# --- what is retried ---------------------------------------------------------------------


def _answer(status: int, code: str) -> ClientError:
    response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "PutObject")  # type: ignore[arg-type]


def test_what_passes_if_asked_again_is_retried_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Throttling, a server's 5xx and a connection lost are transient; an answer about the
    request (412, 404, 403, 501 NotImplemented) or no credentials never is. boto3 tries each
    request once (soma repeats it, knowing it did), with the patience read once."""
    from botocore.exceptions import (
        ConnectionClosedError,
        EndpointConnectionError,
        NoCredentialsError,
        ParamValidationError,
        ReadTimeoutError,
        SSLError,
    )

    for status, code in [(503, "SlowDown"), (500, "InternalError"), (502, "502"), (504, "")]:
        assert s3_requests.transient(_answer(status, code)), (status, code)
    assert s3_requests.transient(_answer(429, "TooManyRequests"))
    assert s3_requests.transient(_answer(400, "RequestTimeout"))
    for status, code in [(412, "PreconditionFailed"), (404, "NoSuchKey"), (403, "AccessDenied")]:
        assert not s3_requests.transient(_answer(status, code)), (status, code)
    assert not s3_requests.transient(_answer(501, "NotImplemented"))
    assert s3_requests.transient(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert s3_requests.transient(ConnectionClosedError(endpoint_url="http://127.0.0.1:1"))
    assert s3_requests.transient(ReadTimeoutError(endpoint_url="http://127.0.0.1:1"))
    assert not s3_requests.transient(SSLError(endpoint_url="http://127.0.0.1:1", error="bad cert"))
    assert not s3_requests.transient(NoCredentialsError())
    assert not s3_requests.transient(ParamValidationError(report="no Key"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("SOMA_STORE_PATIENCE", "7")
    backend = s3.S3Backend("s3://any-bucket/p")
    assert backend.patience.seconds == 7
    assert backend.client.meta.config.retries["total_max_attempts"] == 1
    assert backend.client.meta.config.read_timeout == 7  # within [TIMEOUT_FLOOR, TIMEOUT_CAP]


# --- URLs --------------------------------------------------------------------------------


def test_a_path_and_a_file_url_are_the_folder_store_and_an_unknown_scheme_is_refused(
    tmp_path: Path,
) -> None:
    by_url = Store(f"file://{tmp_path}/st")
    assert isinstance(by_url, FolderStore) and by_url.directory == tmp_path / "st"
    assert isinstance(by_url, Store) and isinstance(Store(tmp_path / "st"), FolderStore)
    assert Store(tmp_path / "st").get(by_url.put(b"x")) == b"x"
    with pytest.raises(BadStore, match="ftp"):
        Store("ftp://host/store")


# --- blobs -------------------------------------------------------------------------------


def test_a_blob_put_comes_back_verified_and_a_flipped_byte_is_refused(store: BackendStore) -> None:
    data = os.urandom(3000)
    digest = store.put(data)
    assert store.has(digest) and store.get(digest) == data
    key = f"{store.backend.prefix}blobs/{digest[:2]}/{digest}"
    flipped = bytearray(data)
    flipped[1234] ^= 1
    store.backend.client.put_object(Bucket=BUCKET, Key=key, Body=bytes(flipped))
    assert store.get(digest) == data  # this reader verified it already (the recent blobs)
    store = Store(store.directory)  # another reader
    with pytest.raises(CorruptBlob, match=digest):
        store.get(digest)


def test_a_large_blob_goes_up_in_parts_and_a_failed_upload_leaves_nothing_readable(
    store: BackendStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3, "MULTIPART_FROM", 6 << 20)
    monkeypatch.setattr(s3, "PART", 5 << 20)
    big = torch.randn(3 << 20)  # 12 MB: three parts
    store.keep("big", {"w": big})
    assert torch.equal(store.recall("big")["w"], big)

    class Died(Exception):
        pass

    def dies_half_way() -> Iterator[memoryview]:
        yield memoryview(bytes(6 << 20))  # one part sent, then the writer dies
        raise Died

    digest = "ab" * 32
    with pytest.raises(Died):
        store.backend.put_blob(digest, dies_half_way(), 12 << 20)
    assert not store.has(digest)
    assert store.backend.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_the_parts_of_a_large_blob_go_up_side_by_side(
    store: BackendStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A multipart upload keeps PARTS_AT_ONCE parts in flight (one TCP stream is below what
    a server takes in), and the blob comes back whole."""
    monkeypatch.setattr(s3, "MULTIPART_FROM", 6 << 20)
    monkeypatch.setattr(s3, "PART", 5 << 20)
    flying, most, lock = [0], [0], threading.Lock()

    def before(**_: object) -> None:
        with lock:
            flying[0] += 1
            most[0] = max(most[0], flying[0])
        time.sleep(0.2)  # long enough for the next part to start, if it does

    def after(**_: object) -> None:
        with lock:
            flying[0] -= 1

    events = store.backend.client.meta.events
    events.register("before-call.s3.UploadPart", before)
    events.register("after-call.s3.UploadPart", after)
    big = torch.randn(5 << 20)  # 20 MB: four parts
    store.keep("big", {"w": big})
    assert most[0] >= 2, "the parts went up one after the other"
    assert torch.equal(Store(store.directory).recall("big")["w"], big)


def _blob_gets(store: BackendStore) -> list[str]:
    """The Range header of every GetObject of a blob this store's client makes ("" if none)."""
    sent: list[str] = []

    def seen(params: dict, **_: object) -> None:
        if "/blobs/" in params["url"]:
            sent.append(params["headers"].get("Range", ""))

    store.backend.client.meta.events.register("before-call.s3.GetObject", seen)
    return sent


def test_a_large_blob_comes_in_ranges_side_by_side_a_small_one_in_one_get(
    store: BackendStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first GET asks for the first PARALLEL_FROM bytes (the whole of a small blob, and
    the size of any); the rest comes in RANGE-byte ranged GETs, hashed in order."""
    monkeypatch.setattr(s3_reads, "PARALLEL_FROM", 1 << 20)
    monkeypatch.setattr(s3_reads, "RANGE", 256 << 10)
    small, large = os.urandom(1 << 20), os.urandom((3 << 20) + 123)
    digests = [store.put(small), store.put(large)]
    reader = Store(store.directory)
    sent = _blob_gets(reader)
    assert reader.get(digests[0]) == small and sent == ["bytes=0-1048575"]
    sent.clear()
    assert reader.get(digests[1]) == large
    assert sent[0] == "bytes=0-1048575" and len(sent) == 1 + 9, sent  # 2 MB + 123 in 256 kB
    assert sorted(sent[1:]) == sorted(
        f"bytes={a}-{min(a + (256 << 10), len(large)) - 1}"
        for a in range(1 << 20, len(large), 256 << 10)
    )
    sent.clear()
    assert reader.get(digests[1]) == large and sent == []  # read here recently: not again


def test_a_tensor_blob_kept_by_the_recent_reads_stays_as_verified_whatever_a_reader_does(
    store: BackendStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large tensor blob is received once into memory the recent-blob cache keeps and
    each reader maps copy-on-write (no copy for the cache): a reader's writes into its
    tensors are its own, and the cache's bytes stay the ones that were verified."""
    monkeypatch.setattr(backend, "SHARED_FROM", 64 << 10)
    w = torch.randn(1 << 18)  # 1 MB
    store.keep("v", {"w": w})
    reader = Store(store.directory)
    first = reader.recall("v")["w"]
    assert torch.equal(first, w)
    assert any(isinstance(kept, recent.Shared) for _, kept in reader._recent._kept.values())
    first.add_(1.0)
    sent = _blob_gets(reader)
    again = reader.recall("v")["w"]
    assert sent == [] and torch.equal(again, w)  # from the recent reads, as verified
    again.mul_(0)
    (digest,) = [d for d, (_, kept) in reader._recent._kept.items() if len(kept) > 1 << 20]
    assert hashlib.sha256(reader.get(digest)).hexdigest() == digest
    assert torch.equal(reader.recall("v")["w"], w)


def _mapped_from(folder: Path) -> list[int]:
    """The sizes of this process's mappings of unlinked files in `folder` (/proc/self/maps)."""
    sizes = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith(f"{folder}/") and "(deleted)" in fields[5]:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            sizes.append(end - start)
    return sizes


def test_a_lazy_read_of_a_large_tensor_blob_the_recent_reads_do_not_keep_is_a_mapped_file(
    store: BackendStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A large tensor blob read lazily, past what the recent-blob cache keeps, lands on an
    unlinked file of the temporary folder and is mapped copy-on-write, as a folder store's
    lazy read is (file pages, not the process's memory: an averaging of 1 GB exports holds
    its mean and little more); an eager read stays in memory. Either way the bytes are the
    verified ones, and a reader's writes into its tensors are its own."""
    monkeypatch.setattr(backend, "SHARED_FROM", 64 << 10)
    monkeypatch.setattr(recent, "RECENT_BYTES", 0)  # the cache keeps nothing
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    w = torch.randn(1 << 18)  # 1 MB
    store.keep("v", {"w": w})
    reader = Store(store.directory)
    lazy = reader.recall("v", lazy=True)["w"]
    assert torch.equal(lazy, w)
    assert any(size >= w.nbytes for size in _mapped_from(tmp_path)), _mapped_from(tmp_path)
    lazy.add_(1.0)  # its own pages
    assert torch.equal(reader.recall("v", lazy=True)["w"], w)
    del lazy
    gc.collect()
    assert _mapped_from(tmp_path) == []  # gone with its tensors
    eager = reader.recall("v")["w"]
    assert torch.equal(eager, w) and _mapped_from(tmp_path) == []
    assert list(tmp_path.iterdir()) == []  # nothing left under a name


# --- names -------------------------------------------------------------------------------


def test_bind_resolve_list_and_forget(store: BackendStore) -> None:
    a, b = store.put(b"a"), store.put(b"b")
    assert store.resolve("run/round/0/client/0") is None
    store.bind("run/round/0/client/0", a)
    store.bind("run/round/0/client/1", a)
    store.bind("run/round/10/client/0", b)
    store.bind("run/round/0/client/0", b)  # replaces
    assert store.resolve("run/round/0/client/0") == b
    assert store.bound("run/round/0/") == ["run/round/0/client/0", "run/round/0/client/1"]
    assert store.bound("run/round/") == [
        "run/round/0/client/0",
        "run/round/0/client/1",
        "run/round/10/client/0",
    ]
    assert store.entries("run/round") == ["0", "10"]
    assert store.forget("run/round/0/client/1") and not store.forget("run/round/0/client/1")
    with pytest.raises(UnknownDigest):
        store.bind("x", "cd" * 32)


# --- health ------------------------------------------------------------------------------


def test_soma_verify_on_a_bucket_finds_a_flipped_byte(
    store: BackendStore, capsys: pytest.CaptureFixture[str]
) -> None:
    w = torch.arange(40.0)
    store.keep("run/round/0/average", {"export": {"w": w}, "size": 3})
    url = store.backend.url
    assert soma(["verify", "--store", url, "--json"]) == 0, capsys.readouterr()
    capsys.readouterr()
    record = store.resolve("run/round/0/average")
    (blob,) = [k[3:] for k, _, _ in store.backend.blobs() if k[3:] != record]
    key = f"{store.backend.prefix}blobs/{blob[:2]}/{blob}"
    body = bytearray(store.backend.client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body[-5] ^= 0x01
    store.backend.client.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))
    assert soma(["verify", "--store", url, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (problem,) = report["problems"]
    assert problem["kind"] == "corrupt" and problem["digest"] == blob
    assert problem["path"] == f"{url}/blobs/{blob[:2]}/{blob}"


def _flip(store: BackendStore, digest: str, at: int = -1) -> None:
    key = f"{store.backend.prefix}blobs/{digest[:2]}/{digest}"
    body = bytearray(store.backend.client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body[at] ^= 0x01
    store.backend.client.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))


def test_a_put_that_verifies_what_is_there_replaces_a_corrupt_blob_and_only_then(
    store: BackendStore,
) -> None:
    w = torch.arange(40.0)
    store.keep("a", {"w": w})
    (blob,) = [k[3:] for k, _, _ in store.backend.blobs() if k[3:] != store.resolve("a")]
    _flip(store, blob)
    store.keep("a", {"w": w})  # trusted as there: no read, no write
    with pytest.raises(CorruptBlob):
        store.recall("a")
    fixer = Store(store.backend.url, verify_existing=True)
    fixer.keep("a", {"w": w})
    assert torch.equal(store.recall("a")["w"], w)


def test_soma_repair_on_a_bucket_removes_a_corrupt_blob_nothing_needs(
    store: BackendStore, capsys: pytest.CaptureFixture[str]
) -> None:
    store.keep("run/round/0/average", {"export": {"w": torch.ones(3)}})
    stray = store.put(b"nothing names me")
    _flip(store, stray, 0)
    assert soma(["repair", "--store", store.backend.url]) == 0, capsys.readouterr()
    assert not store.has(stray) and store.has(store.resolve("run/round/0/average"))
    assert soma(["verify", "--store", store.backend.url]) == 0


def test_a_server_that_ignores_if_none_match_is_refused_before_anything_is_claimed(
    bucket: str,
) -> None:
    store = Store(f"s3://{BUCKET}/ignores")
    a = store.put(b"a")

    def strip(request: object, **_: object) -> None:  # what such a server does with it
        if "If-None-Match" in request.headers:
            del request.headers["If-None-Match"]

    store.backend.client.meta.events.register("before-sign.s3.PutObject", strip)
    with pytest.raises(BadStore, match="ignores If-None-Match"):
        store.claim("run/round/0/averaging", a)
    assert store.resolve("run/round/0/averaging") is None


# --- a run -------------------------------------------------------------------------------


def test_a_run_simulated_on_a_bucket_reaches_the_same_bits_as_on_a_folder(
    bucket: str, tmp_path: Path
) -> None:
    from soma.run.simulate import simulate

    on = {
        where: simulate("soma.tasks.control", clients=3, rounds=2, seed=1, tree=2, store=where)
        for where in (f"s3://{BUCKET}/simulated", str(tmp_path / "store"))
    }
    on_bucket, on_folder = on.values()
    assert on_bucket.weights == on_folder.weights  # the digest of the final weights
    assert Store(f"s3://{BUCKET}/simulated").has(on_bucket.weights)


def _stubbed(monkeypatch: pytest.MonkeyPatch, *answers: tuple[str, int, str]) -> BackendStore:
    """A store whose S3 client answers `answers` in order (operation, HTTP status, error code;
    status 200: an empty success), with no server behind it."""
    from botocore.stub import Stubber

    client = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="k",
        aws_secret_access_key="k",
    )
    stubber = Stubber(client)
    for operation, status, code in answers:
        if status == 200:
            stubber.add_response(operation, {})
        else:
            stubber.add_client_error(operation, code, code, status)
    stubber.activate()
    monkeypatch.setattr(s3, "client_for", lambda patience: client)
    made = Store("s3://stubbed/p")
    assert isinstance(made, BackendStore)
    return made


def test_a_missing_bucket_is_refused_before_a_read_takes_its_404_for_a_missing_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _stubbed(monkeypatch, ("head_bucket", 404, "404"))
    with pytest.raises(BadStore, match="bucket 'stubbed' does not exist at http://127.0.0.1:9"):
        store.resolve("run/rounds")  # a GET of a key there would be a 404: "not bound"


def test_a_bucket_gone_after_the_look_is_no_empty_store(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _stubbed(monkeypatch, ("head_bucket", 200, ""), ("get_object", 404, "NoSuchBucket"))
    with pytest.raises(BadStore, match="bucket 'stubbed' does not exist"):
        store.resolve("run/rounds")


@pytest.mark.parametrize("seen", [True, False])
def test_access_denied_says_the_bucket_may_not_exist_unless_it_was_seen(
    monkeypatch: pytest.MonkeyPatch, seen: bool
) -> None:
    """A 403 at the look is no verdict (credentials for a prefix may not ask about the
    bucket): the store goes on, and a refused write says what an AccessDenied may mean."""
    head = ("head_bucket", 200, "") if seen else ("head_bucket", 403, "AccessDenied")
    store = _stubbed(monkeypatch, head, ("put_object", 403, "AccessDenied"))
    with pytest.raises(StoreError) as refused:
        store.put(b"x")
    said = str(refused.value)
    assert "these credentials may not reach s3://stubbed/p/" in said
    assert ("bucket 'stubbed' may not exist" in said) is not seen, said


@pytest.mark.parametrize(
    "command",
    [
        ["verify"],
        ["status", "--run", "r"],  # its first request is a GET of a name: a 404 either way
        ["simulate", "--rounds", "1", "--clients", "2"],
    ],
)
def test_a_bucket_that_is_not_there_is_one_line_naming_it_and_how_to_make_it(
    bucket: str, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """A GET or HEAD of a key in a missing bucket is a 404, as of a key not there, and
    SeaweedFS answers a PUT there "AccessDenied" (with no identity configured) or makes the
    bucket (for an identity, as here): without a look at the bucket, a reader saw an empty
    store, and a writer a refusal that did not say why or a new bucket of a mistyped name."""
    assert soma([*command, "--store", "s3://no-such-bucket/x"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("soma: store s3://no-such-bucket/x: "), err
    assert "bucket 'no-such-bucket' does not exist at http://127.0.0.1:" in err
    assert "soma bucket serve --bucket no-such-bucket" in err and "aws s3 mb" in err


def test_a_store_asks_about_its_bucket_once_before_its_first_request_and_opening_asks_nothing(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the look at the bucket costs: no request to open a store, one HeadBucket before
    its first request, none after (counted on a proxy that logs every request)."""
    from s3_faults import FaultProxy

    with FaultProxy(os.environ["AWS_ENDPOINT_URL"]) as proxy:
        with monkeypatch.context() as m:
            m.setenv("AWS_ENDPOINT_URL", proxy.url)
            store = Store(f"s3://{BUCKET}/asked-once")
        assert isinstance(store, BackendStore)
        assert proxy.log == [], "opening a store makes no request"
        digest = store.put(b"asked once")
        assert store.get(digest) == b"asked once" and store.has(digest)
        assert store.bound("") == []
        bucket_heads = [entry for entry in proxy.log if entry[:2] == ("HEAD", f"/{BUCKET}")]
        assert len(bucket_heads) == 1 and proxy.log[0] == bucket_heads[0], proxy.log
    fresh = s3.S3Backend(f"s3://{BUCKET}/asked-once")
    started = time.perf_counter()
    fresh._check_bucket("HEAD", "")
    print(f"the look at the bucket: {1000 * (time.perf_counter() - started):.1f} ms")


def test_an_averaging_on_a_bucket_downloads_each_clients_weights_once(bucket: str) -> None:
    """Checked before the claim, averaged after it: the second read is served by the blobs
    this store read recently, not by a second download."""
    from soma.round import Meeting, average_round, contribute

    writer = Store(f"s3://{BUCKET}/once-each")
    meeting = Meeting("once", 0, 3)
    for k in range(3):
        contribute(writer, meeting, {"n": {"w": torch.full((4,), float(k))}}, mine=k, size=1)
    averager = Store(f"s3://{BUCKET}/once-each")  # another process's view: nothing read yet
    fetched: list[str] = []

    def count(params: dict, **_: object) -> None:
        if "/blobs/" in params["url"]:
            fetched.append(params["url"].rsplit("/", 1)[1])

    averager.backend.client.meta.events.register("before-call.s3.GetObject", count)
    average_round(averager, meeting, deadline=30, lease=LEASE)
    assert fetched and len(fetched) == len(set(fetched)), sorted(fetched)
