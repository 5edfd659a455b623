"""The S3 store rides through transient faults and tells a lost answer from a bad server
(soma.store.s3.backend on soma.store.patience).

Real requests to real SeaweedFS: the session's server behind a fault-injecting proxy
(tests/s3_faults.py: 503 SlowDown, answers lost after the server acted, headers
stripped, bodies substituted or cut, connections refused or never answered), and a server of
the test's own killed -9 and restarted (tests/s3_bucket.py's `Server`).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("boto3", reason="boto3 (soma[s3]) is not installed")

from s3_bucket import BUCKET, Server  # noqa: E402
from s3_faults import FaultProxy  # noqa: E402

import soma.store.s3.reads as s3_reads  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.store.backend import BackendStore  # noqa: E402
from soma.store.errors import BadStore, StoreUnavailable  # noqa: E402

_PLACES = itertools.count()
NAME = "run/round/0/averaging"


@pytest.fixture
def proxy(bucket: str) -> Iterator[FaultProxy]:
    """The fault proxy in front of the session's server."""
    with FaultProxy(os.environ["AWS_ENDPOINT_URL"]) as proxy:
        yield proxy


@pytest.fixture
def place() -> str:
    """A store URL of the test's own in the session's bucket."""
    return f"s3://{BUCKET}/faults-{os.getpid()}-{next(_PLACES)}"


def _store(
    url: str, endpoint: str, monkeypatch: pytest.MonkeyPatch, patience: float | None = None
) -> BackendStore:
    """A store on `url` whose requests go to `endpoint` (its client keeps it), with its own
    patience; the environment is as it was afterwards."""
    with monkeypatch.context() as m:
        m.setenv("AWS_ENDPOINT_URL", endpoint)
        if patience is not None:
            m.setenv("SOMA_STORE_PATIENCE", str(patience))
        made = Store(url)
    assert isinstance(made, BackendStore)
    return made


def _key(store: BackendStore, digest: str) -> str:
    return f"{store.backend.prefix}blobs/{digest[:2]}/{digest}"


# --- transient answers -------------------------------------------------------------------


@pytest.mark.slow
def test_six_503_slow_downs_to_one_blob_put_are_ridden_through_and_the_bytes_are_right(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore alone gave up after 2 retries (~1 s): a client contributing during a SlowDown
    storm failed. The put now waits them out (0.1 + 0.2 + ... + 3.2 s) with the patience."""
    store = _store(place, proxy.url, monkeypatch)
    data = os.urandom(200_000)
    digest = hashlib.sha256(data).hexdigest()
    proxy.slow_down(6, "PUT", digest)
    assert store.put(data) == digest
    assert proxy.count("PUT", digest, "slow_down") == 6
    assert proxy.count("PUT", digest, "forward") == 1
    assert Store(place).get(digest) == data  # another reader, straight to the server


def test_a_store_out_of_patience_says_which_store_and_request_within_its_patience(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(place, proxy.url, monkeypatch, patience=2)
    data = os.urandom(1000)
    digest = hashlib.sha256(data).hexdigest()
    proxy.slow_down(None, "PUT", digest)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as refused:
        store.put(data)
    spent = time.monotonic() - started
    message = str(refused.value)
    assert f"PUT of s3://{BUCKET}/{_key(store, digest)}" in message, message
    assert "SOMA_STORE_PATIENCE" in message and "SlowDown" in message, message
    assert 1.0 < spent < 4.0, spent
    assert proxy.count("PUT", digest, "slow_down") >= 4  # 0.1, 0.2, 0.4, 0.8 s apart


# --- lost answers ------------------------------------------------------------------------


def test_a_claim_whose_answer_was_lost_is_won_and_the_next_claimer_loses(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server created the name, the proxy lost the answer (500), the repeated claim got
    412: its own write, read back (this claim's body and token), so it won; before, it was
    told it lost and nobody averaged the round."""
    store, direct = _store(place, proxy.url, monkeypatch), Store(place)
    mine, theirs = store.put(b"mine"), direct.put(b"theirs")
    proxy.lose_answer(1, "PUT", f"/names/{NAME}$")
    assert store.claim(NAME, mine)
    assert proxy.count("PUT", f"/names/{NAME}$", "lose") == 1  # written, answer lost
    assert direct.resolve(NAME) == mine
    assert not direct.claim(NAME, theirs)
    assert direct.resolve(NAME) == mine


def test_a_second_claimer_of_the_same_digest_whose_refusal_was_lost_still_loses(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two claimers, one digest (many processes claim a run's starting weights): a repeated
    claim finds the name holding exactly its body, but not its token: the other's, a loss."""
    first, second = (_store(place, proxy.url, monkeypatch) for _ in range(2))
    digest = first.put(b"the same for both")
    assert first.claim(NAME, digest)
    proxy.lose_answer(1, "PUT", f"/names/{NAME}$")  # the second's 412, replaced by a 500
    assert not second.claim(NAME, digest)
    assert proxy.count("PUT", f"/names/{NAME}$", "lose") == 1
    assert proxy.count("PUT", f"/names/{NAME}$", "forward") == 2  # the first's; the repeat


def test_a_swap_whose_answer_was_lost_returns_the_tag_it_wrote(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease's renewal (compare-and-swap) written, its answer lost: the repeat's 412 is
    its own write, so the renewal holds, with the tag the name has now."""
    store = _store(place, proxy.url, monkeypatch)
    a, b = store.put(b"lease a"), store.put(b"lease b")
    lease = "run/round/0/lease"
    proxy.lose_answer(1, "PUT", f"/names/{lease}$")
    tag = store.swap(lease, None, a)
    assert tag is not None and store.resolve_tagged(lease) == (a, tag)
    proxy.lose_answer(1, "PUT", f"/names/{lease}$")
    renewed = store.swap(lease, tag, b)
    assert renewed is not None and store.resolve_tagged(lease) == (b, renewed)
    assert store.swap(lease, tag, a) is None  # a stale tag is still refused
    assert proxy.count("PUT", f"/names/{lease}$", "lose") == 2


# --- the probe of the server's conditional writes ----------------------------------------


def test_the_probe_takes_a_lost_answer_for_one_and_still_refuses_a_server_ignoring_if_none_match(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first create of a fresh random key refused can only be that create's own write
    (its answer lost): before, soma told the operator to replace a working server."""
    store = _store(place, proxy.url, monkeypatch)
    a = store.put(b"a")
    proxy.lose_answer(1, "PUT", "/probe/")
    assert store.claim(NAME, a)  # no BadStore
    assert proxy.count("PUT", "/probe/", "lose") == 1
    proxy.clear()
    proxy.strip_header("If-None-Match", "PUT", "/probe/")  # what such a server does with it
    other = _store(place + "-ignored", proxy.url, monkeypatch)
    b = other.put(b"b")
    with pytest.raises(BadStore, match="ignores If-None-Match"):
        other.claim(NAME, b)
    assert other.resolve(NAME) is None


# --- bounded reads -----------------------------------------------------------------------


def _settled(proxy: FaultProxy) -> int:
    """The proxy's body bytes sent, once they stop growing (the reader hung up)."""
    last = -1
    while proxy.body_bytes_sent != last:
        last = proxy.body_bytes_sent
        time.sleep(0.3)
    return last


def test_a_300_mb_body_substituted_for_a_small_blob_is_read_no_further_than_the_limit(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read the caller bounds (soma.store.backend's bounded reads) takes at most `limit + 1`
    bytes and drops the connection: before, the whole 300 MB arrived (520 MB RSS) before the
    hash refused it."""
    store = _store(place, proxy.url, monkeypatch)
    data = os.urandom(5000)
    digest = store.put(data)
    proxy.substitute_body(300 << 20, "GET", digest)
    tracemalloc.start()
    try:
        chunks = store.backend.read_blob(digest, limit=len(data))
        assert chunks is not None
        got = bytearray()
        for chunk in chunks:
            got += chunk
            if len(got) > len(data) + 1:
                chunks.close()  # type: ignore[attr-defined]
                break  # more than the limit allows: no need to take the 300 MB to know
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(got) == len(data) + 1 and got == bytes(len(data) + 1), len(got)
    sent = _settled(proxy)
    print(f"substituted 300 MB body: {len(got)} bytes taken, {sent} sent by the proxy, "
          f"peak traced allocation {peak} bytes")  # fmt: skip
    assert sent < 32 << 20, sent  # what the sockets' buffers held, not the 300 MB
    assert peak < 8 << 20, peak


def test_a_blob_read_never_hands_out_more_than_its_content_length(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(place, proxy.url, monkeypatch)
    data = os.urandom(3000)
    digest = store.put(data)
    proxy.substitute_body(7000, "GET", digest)
    chunks = store.backend.read_blob(digest)
    assert chunks is not None and len(b"".join(chunks)) == 7000  # its Content-Length, then the end
    with pytest.raises(Exception, match=digest):
        store.get(digest)  # and the store refuses it (the hash)


def test_a_read_cut_midway_resumes_where_it_stopped_and_one_cut_every_time_is_a_refusal(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(place, proxy.url, monkeypatch, patience=2)
    data = os.urandom(3 << 20)
    digest = store.put(data)
    proxy.cut_body(1 << 20, times=1, path=digest)
    chunks = store.backend.read_blob(digest)
    assert chunks is not None and b"".join(chunks) == data
    assert proxy.count("GET", digest) == 2  # cut after 1 MB; the rest asked for by range
    proxy.cut_body(0, times=None, path=digest)  # no byte ever arrives
    with pytest.raises(StoreUnavailable, match=_key(store, digest)):
        b"".join(store.backend.read_blob(digest) or [])


def test_ranges_cut_while_side_by_side_each_resume_where_they_stopped(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large blob's ranges in flight together: each cut resumes by its own ranged GET from
    where it stopped, and the blob comes back whole; cut every time, the read is refused
    within the patience and nothing is returned."""
    monkeypatch.setattr(s3_reads, "PARALLEL_FROM", 1 << 20)
    monkeypatch.setattr(s3_reads, "RANGE", 512 << 10)
    store = _store(place, proxy.url, monkeypatch, patience=2)
    data = os.urandom(3 << 20)
    digest = store.put(data)
    reader = _store(place, proxy.url, monkeypatch, patience=2)  # nothing read recently
    proxy.cut_body(100 << 10, times=3, path=digest)  # the first answer and two ranges
    assert reader.get(digest) == data
    assert proxy.count("GET", digest) == 1 + 4 + 3  # each cut asked again once, by range
    proxy.cut_body(0, times=None, path=digest)
    with pytest.raises(StoreUnavailable, match=digest):
        _store(place, proxy.url, monkeypatch, patience=2).get(digest)


# --- a server out --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_server_refusing_or_never_answering_for_longer_than_the_patience_is_unavailable(
    proxy: FaultProxy, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a hang: connections refused, the patience runs out; a server that accepts and
    never answers (stopped), boto3's read timeout (at least 5 s) ends each try."""
    store = _store(place, proxy.url, monkeypatch, patience=2)
    digest = Store(place).put(b"out of reach")
    proxy.refuse()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="GET of s3://"):
        store.get(digest)
    refused = time.monotonic() - started
    proxy.accept()
    proxy.hang()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="HEAD of s3://"):
        store.has(digest)
    hung = time.monotonic() - started
    proxy.clear()
    print(f"unavailable after {refused:.1f} s (refused), {hung:.1f} s (no answer)")
    assert refused < 4.0 and hung < 12.0, (refused, hung)
    assert store.get(digest) == b"out of reach"  # and back when it is


@pytest.mark.slow
def test_a_server_killed_mid_claim_and_restarted_within_the_patience_is_ridden_through(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 of a real SeaweedFS between a put and the claim's PUT, restarted at once (it
    takes ~20 s to answer again): every client failed before; now the put/claim/get
    sequence finishes with the right bytes. Killed for good, a store with little patience
    says so instead of hanging."""
    server = Server(str(tmp_path / "own"))
    restarting: list[threading.Thread] = []
    server.start()
    try:
        server.ready()
        url = f"s3://{BUCKET}/restarted"
        store = _store(url, server.url, monkeypatch)
        data = os.urandom(300_000)
        digest = store.put(data)
        killed: list[float] = []
        restarted: list[float] = []

        def restart() -> None:
            server.start()
            restarted.append(server.ready())

        def kill_before_the_claim(params: dict, **_: object) -> None:
            if "/names/" in params["url"] and not killed:
                killed.append(time.monotonic())
                server.kill()
                restarting.append(threading.Thread(target=restart, daemon=True))
                restarting[0].start()

        store.backend.client.meta.events.register("before-call.s3.PutObject", kill_before_the_claim)
        started = time.monotonic()
        assert store.claim(NAME, digest)
        claimed = time.monotonic() - started
        assert store.get(digest) == data
        other = _store(url, server.url, monkeypatch)
        assert other.get(digest) == data and other.resolve(NAME) == digest
        assert not other.claim(NAME, other.put(b"later"))
        print(f"claim across a kill -9 and restart: {claimed:.1f} s "
              f"(the server answered again {restarted[0]:.1f} s after its start)")  # fmt: skip
        assert killed and restarted, "the server was never killed"
        server.kill()
        hopeless = _store(url, server.url, monkeypatch, patience=2)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=f"s3://{BUCKET}/restarted/"):
            hopeless.get(digest)
        assert time.monotonic() - started < 4.0
    finally:
        for thread in restarting:  # a server started after this kill would outlive the test
            thread.join(timeout=120)
        server.kill()
