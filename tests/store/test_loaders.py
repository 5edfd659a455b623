"""The store's loaders refuse within bounds (soma.store.tensorfile, codecs, backend).

A tensor file's header (`<u64 length><JSON {key: {dtype, shape, data_offsets}}><data>`) and a
record are read from blobs anybody could have written: every refusal here is a named one
(`BadBlob`, `OversizedBlob`) that says the blob and, for a tensor, its key, reached in bounded
time and memory, never a torch error, a RecursionError, or a read of everything that arrives.
Memory is measured with tracemalloc (what Python allocates); time only as the issue asks
(a million-entry header refused in under a second of CPU).
"""

from __future__ import annotations

import gc
import hashlib
import json
import struct
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from memory_bucket import MemoryBucket

from soma.store import Store, record_json, tensorfile
from soma.store.backend import BackendStore
from soma.store.errors import BadBlob, CorruptBlob, NoCodec, OversizedBlob

MB = 1 << 20


def tensor_file(header: object, data: bytes = b"", length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def entry(shape: list[int], begin: int, end: int, dtype: str = "F32") -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


# --- an in-test backend: blobs in a dict, what it hands out counted ------------------------


class MemoryBackend(MemoryBucket):
    """The bucket in memory (tests/memory_bucket.py), whose blob reads `bodies` substitutes
    (a generator of chunks each), handed out in chunks with every byte counted."""

    url = "memory://test"

    def __init__(self, chunk: int = 64 << 10) -> None:
        super().__init__()
        self.bodies: dict[str, object] = {}  # digest -> () -> Iterator[bytes]
        self.chunk = chunk
        self.handed = 0
        self.limits: list[int | None] = []

    def has_blob(self, digest: str) -> bool:
        return digest in self.blobs or digest in self.bodies

    def read_blob(self, digest: str, limit: int | None = None) -> Iterator[bytes] | None:
        self.limits.append(limit)
        if digest in self.bodies:
            return self._counted(self.bodies[digest](), limit)
        if digest not in self.blobs:
            return None
        data = self.blobs[digest]
        return self._counted(
            (data[i : i + self.chunk] for i in range(0, len(data), self.chunk)), limit
        )

    def _counted(self, chunks: Iterator[bytes], limit: int | None) -> Iterator[bytes]:
        """Hand out `chunks`, at most `limit + 1` bytes when there is a limit (a ranged GET)."""
        left = None if limit is None else limit + 1
        for chunk in chunks:
            if left is not None:
                chunk = chunk[:left]
                left -= len(chunk)
            self.handed += len(chunk)
            yield chunk
            if left == 0:
                return


def substituted(real: bytes, extra: int, chunk: int = MB) -> object:
    """A body of `real` and then `extra` more bytes, made as it is handed out (never held)."""
    filler = bytes(chunk)

    def body() -> Iterator[bytes]:
        yield real
        for start in range(0, extra, chunk):
            yield filler[: min(chunk, extra - start)]

    return body


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


def reader(backend: MemoryBackend) -> BackendStore:
    """A store on `backend` that never put anything (so knows no blob's size)."""
    return BackendStore(backend)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


def refused_naming(call, where: object, *says: str, error: type = BadBlob) -> str:
    with pytest.raises(error) as refused:
        call()
    message = str(refused.value)
    assert str(where) in message, message
    for said in says:
        assert said in message, message
    return message


def load_both(store: Store, data: bytes, *says: str) -> None:
    """`data` as a blob is refused naming it and `says`, eager, lazy, and recalled."""
    digest = store.put(data)
    for lazy in (False, True):
        refused_naming(
            lambda lazy=lazy: store.get_tensors(digest, lazy=lazy), store.blob_path(digest), *says
        )


# --- every number checked before torch sees it ---------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [[0, 2**62, 2**62], [0, 2**63], [0, 2**64], [2**63 - 1, 0], [0, 2**31, 2**31, 2**31]],
    ids=["0x2^62x2^62", "0x2^63", "0x2^64", "2^63-1x0", "0x2^31x2^31x2^31"],
)
def test_a_zero_size_tensor_with_overflowing_dims_is_refused_naming_blob_and_key(
    store: Store, shape: list[int]
) -> None:
    data = tensor_file({"weight": entry(shape, 0, 0)})
    load_both(store, data, "'weight'", "more than a tensor can index")


def test_a_zero_size_tensor_with_dims_a_tensor_can_index_is_read(store: Store) -> None:
    data = tensor_file({"weight": entry([0, 2**20, 2**20], 0, 0), "b": entry([1], 0, 4)}, bytes(4))
    got = store.get_tensors(store.put(data))
    assert got["weight"].shape == (0, 2**20, 2**20) and got["b"].shape == (1,)


def test_torch_refusing_a_tensor_is_a_bad_blob_naming_blob_and_key() -> None:
    """Whatever passes the checks and torch still refuses is BadBlob, never torch's error
    (an entry made here without the checks, as a future torch might refuse one)."""
    base = torch.zeros(16, dtype=torch.uint8)
    wild = tensorfile.Entry("wild", torch.float32, (0, 2**62, 2**62), 16, 16)
    refused_naming(lambda: tensorfile.tensors_from(base, [wild], "blob-x"), "blob-x", "'wild'")


def test_more_dimensions_than_allowed_are_refused(store: Store) -> None:
    shape = [1] * (tensorfile.MAX_DIMS + 1)
    load_both(store, tensor_file({"deep": entry(shape, 0, 4)}, bytes(4)), "'deep'", "dimensions")
    with pytest.raises(NoCodec, match="dimensions"):
        store.put_tensors({"deep": torch.zeros(shape)})


@pytest.mark.parametrize(
    "layout, says",
    [
        ({"a": entry([2], 0, 8), "b": entry([2], 4, 12)}, ["'b'", "overlaps"]),
        ({"a": entry([1], 0, 4), "b": entry([1], 8, 12)}, ["'b'", "gap"]),
        ({"a": entry([1], 4, 8), "b": entry([1], 0, 4), "c": entry([1], 12, 16)}, ["'c'", "gap"]),
        ({"a": entry([4], 0, 16)}, ["past the end"]),
        ({"a": entry([2], 8, 4)}, ["'a'", "[begin, end]"]),
        ({"a": entry([2], -4, 4)}, ["'a'", "[begin, end]"]),
        ({"a": entry([2.0], 0, 8)}, ["'a'", "non-negative integers"]),
        ({"a": entry([True, 2], 0, 8)}, ["'a'", "non-negative integers"]),
        ({"a": entry([3], 0, 8)}, ["'a'", "span 8 bytes"]),
    ],
    ids=[
        "overlap",
        "gap",
        "gap-out-of-order",
        "past-end",
        "reversed",
        "negative",
        "float-dim",
        "bool-dim",
        "dims-x-itemsize",
    ],
)
def test_offsets_and_sizes_are_checked_in_exact_integers(
    store: Store, layout: dict, says: list[str]
) -> None:
    load_both(store, tensor_file(layout, bytes(12)), *says)


def test_the_exact_checks_are_a_pure_function() -> None:
    assert tensorfile.check_entry("k", entry([2, 3], 8, 32)) == (torch.float32, (2, 3), 8, 32)
    with pytest.raises(ValueError, match="'k'.*index"):
        tensorfile.check_entry("k", entry([0, 2**62, 2**62], 0, 0))
    with pytest.raises(ValueError, match="'b' overlaps"):
        tensorfile.check_layout({"a": entry([2], 0, 8), "b": entry([1], 4, 8)}, 100, None)
    layout = tensorfile.check_layout({"a": entry([2], 0, 8)}, 100, 108)
    assert [(e.key, e.begin, e.end) for e in layout] == [("a", 100, 108)]


# --- the header's size, capped before it is parsed -----------------------------------------


def million_entries() -> bytes:
    """A valid-looking header of a million zero-size tensors, as one file (~57 MB)."""
    body = b'{"dtype":"U8","shape":[0],"data_offsets":[0,0]}'
    parts = [b'"t%d":%s' % (i, body) for i in range(1_000_000)]
    raw = b"{" + b",".join(parts) + b"}"
    return struct.pack("<Q", len(raw)) + raw


def test_a_million_entry_header_is_refused_in_under_a_second_with_bounded_memory(
    tmp_path: Path,
) -> None:
    """Read whole (as a verified blob is) and described (its header read alone): each is
    refused by counting, within a copy of the header, where parsing it took +640 MB."""
    data = million_entries()
    path = tmp_path / "million.safetensors"
    path.write_bytes(data)
    where = "blob-million"
    with path.open("rb", buffering=0) as f:
        refusals = [
            lambda: tensorfile.read_header(memoryview(data), where),
            lambda: tensorfile.describe(f, where),
        ]
        for refusal in refusals:
            message, spent, peak = measured(
                lambda r=refusal: refused_naming(r, where, "JSON objects")
            )
            assert f"more than the {tensorfile.MAX_TENSORS} tensors" in message
            assert spent < 1.0, f"{spent:.2f} s of CPU"
            assert peak < 1.5 * len(data), f"{peak / MB:.0f} MB for {len(data) / MB:.0f} MB"


def measured(call) -> tuple[object, float, int]:
    """What `call()` returns, the CPU seconds it took and the most memory Python held for
    it at once (tracemalloc: what Python allocates; what was held before is not counted)."""
    gc.collect()
    tracemalloc.start()
    started = time.process_time()
    try:
        result = call()
        spent = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, spent, peak


def test_a_header_of_more_tensors_than_the_cap_is_refused_before_parsing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tensorfile, "MAX_TENSORS", 10)
    eleven = {f"t{i}": entry([1], 4 * i, 4 * i + 4) for i in range(11)}  # counted once parsed
    load_both(store, tensor_file(eleven, bytes(44)), "describes 11", "more than the 10 tensors")
    thirteen = {f"t{i}": entry([1], 4 * i, 4 * i + 4) for i in range(13)}  # and before
    load_both(
        store, tensor_file(thirteen, bytes(52)), "14 JSON objects", "more than the 10 tensors"
    )
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("parsed"))  # never reached
    with pytest.raises(BadBlob, match="more than the 10"):
        tensorfile.read_header(memoryview(tensor_file(thirteen, bytes(52))), "x")


def test_more_tensors_than_the_cap_are_refused_when_kept(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tensorfile, "MAX_TENSORS", 3)
    with pytest.raises(NoCodec, match="4 tensors"):
        store.put_tensors({f"t{i}": torch.zeros(1) for i in range(4)})
    with pytest.raises(NoCodec, match="loose tensors"):
        store.keep("many", [torch.zeros(1) for _ in range(4)])


def test_a_long_list_in_a_short_header_is_refused_before_parsing(store: Store) -> None:
    """A shape of ten million zeros is one object and ~20 MB: refused by its commas."""
    raw = b'{"w":{"dtype":"F32","shape":[' + b"0," * 10_000_000 + b'0],"data_offsets":[0,0]}}'
    data = struct.pack("<Q", len(raw)) + raw
    _, _, peak = measured(
        lambda: refused_naming(lambda: tensorfile.read_header(memoryview(data), "x"), "x", "commas")
    )
    assert peak < 2 * len(data), f"{peak / MB:.0f} MB"  # parsed, it would be ~80 MB of list


@pytest.mark.parametrize("length", [2**40, tensorfile.MAX_HEADER + 1])
def test_a_header_length_past_the_cap_is_refused_before_reading_it(
    store: Store, tmp_path: Path, length: int
) -> None:
    data = tensor_file(b"{}", length=length)
    load_both(store, data, "claims")
    path = tmp_path / "f"
    path.write_bytes(data)
    with path.open("rb") as f:
        refused_naming(lambda: tensorfile.describe(f, "blob-y"), "blob-y", "more than the")


def test_a_tensor_of_2_to_the_40_elements_is_refused_quickly(store: Store) -> None:
    data = tensor_file({"huge": entry([2**20, 2**20], 0, 2**42)}, bytes(16))
    digest = store.put(data)
    started = time.process_time()
    load_both(store, data, "past the end")
    refused_naming(lambda: store.describe(digest), store.blob_path(digest), "past the end")
    assert time.process_time() - started < 1.0


# --- describe: never a RecursionError ------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [b"[" * 100_000, b'{"a":' * 100_000, b'{"w":{"dtype":"F32","shape":' + b"[" * 100_000],
    ids=["lists", "objects", "in-a-shape"],
)
def test_describe_refuses_a_deeply_nested_header_as_a_bad_blob(store: Store, header: bytes) -> None:
    digest = store.put(tensor_file(header))
    refused_naming(lambda: store.describe(digest), store.blob_path(digest), "not JSON")


def test_describe_checks_what_it_describes(store: Store) -> None:
    data = tensor_file({"w": entry([0, 2**62, 2**62], 0, 0)})
    digest = store.put(data)
    refused_naming(lambda: store.describe(digest), store.blob_path(digest), "'w'", "index")
    good = store.put_tensors({"w": torch.zeros(2, 3)})
    assert store.describe(good) == {"w": (torch.float32, (2, 3))}


def test_a_deeply_nested_record_is_a_bad_blob_naming_it(store: Store) -> None:
    for depth in (5_000, 100_000):
        data = b'{"soma":1,"value":' + b"[" * depth + b"]" * depth + b"}"
        digest = store.put(data)
        refused_naming(lambda d=digest: store.recall_digest(d), store.blob_path(digest), "nested")


def test_a_record_past_its_cap_is_refused_kept_or_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_json, "MAX_RECORD", 1000)  # the one cap, soma.store.record_json
    with pytest.raises(NoCodec, match="more than the 1000"):
        store.keep("big", {"text": "x" * 2000})
    digest = store.put(json.dumps({"soma": 1, "value": "x" * 2000}).encode())
    refused_naming(lambda: store.recall_digest(digest), store.blob_path(digest), "1000")


# --- a backend's reads stop at what the blob can be ---------------------------------------


def test_a_300_mb_body_for_a_3_kb_tensor_blob_is_refused_after_reading_its_size(
    backend: MemoryBackend,
) -> None:
    """Its own honest header says 3 kB; the read stops there, whatever follows."""
    writer = BackendStore(backend)
    digest = writer.put_tensors({"w": torch.randn(750)})
    data = backend.blobs.pop(digest)
    assert 3000 < len(data) < 3100
    backend.bodies[digest] = substituted(data, 300 * MB)
    store = reader(backend)
    message, _, peak = measured(
        lambda: refused_naming(
            lambda: store.get_tensors(digest),
            digest,
            f"more than {len(data)} bytes",
            "header",
            error=OversizedBlob,
        )
    )
    assert store.blob_path(digest) in message
    assert backend.handed <= len(data) + MB, f"{backend.handed} bytes handed out"
    assert peak < 4 * MB, f"{peak / MB:.1f} MB"
    with pytest.raises(CorruptBlob):  # what it is, as far as the damage rule goes
        store.get_tensors(digest)


def test_a_blob_this_process_put_is_read_no_further_than_its_size(
    backend: MemoryBackend,
) -> None:
    store = BackendStore(backend)
    digest = store.put(b"a record's few hundred bytes" * 10)
    blob = store.put_tensors({"w": torch.randn(750)})
    size = len(backend.blobs[blob])
    backend.bodies[digest] = substituted(backend.blobs[digest], 300 * MB)
    backend.bodies[blob] = substituted(backend.blobs[blob], 300 * MB)
    store._recent = type(store._recent)()  # nothing read yet
    refused_naming(lambda: store.get(digest), digest, "280 bytes", error=OversizedBlob)
    refused_naming(lambda: store.get_tensors(blob), blob, f"{size} bytes", error=OversizedBlob)
    assert backend.limits == [280, size]  # passed down: a ranged read stops there too
    assert backend.handed <= 280 + 1 + size + 1


def test_a_substituted_record_is_read_no_further_than_a_records_cap(
    backend: MemoryBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_json, "MAX_RECORD", 64 << 10)
    digest = BackendStore(backend).keep("v", {"size": 3})
    backend.bodies[digest] = substituted(backend.blobs.pop(digest), 300 * MB)
    store = reader(backend)
    refused_naming(lambda: store.recall("v"), digest, "record", error=OversizedBlob)
    assert backend.limits == [record_json.MAX_RECORD]
    assert backend.handed <= record_json.MAX_RECORD + 1


def test_a_record_file_longer_than_the_cap_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_json, "MAX_RECORD", 64 << 10)
    digest = Store(tmp_path).keep("v", {"size": 3})
    store = Store(
        tmp_path
    )  # another reader: the writer reads its small blobs from memory (folder.write_cache)
    path = store.blob_path(digest)
    path.chmod(0o644)
    with open(path, "wb") as f:  # planted: a sparse 300 MB file, nothing of it in memory
        f.truncate(300 * MB)
    tracemalloc.start()
    try:
        with pytest.raises(BadBlob, match=rf"blob {path} is {300 * MB} bytes, more than"):
            store.recall("v")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MB, f"{peak} bytes allocated to refuse it"


def test_a_forged_header_costs_what_it_declares_then_fails_the_hash(
    backend: MemoryBackend,
) -> None:
    """The documented limit of the bound: an unverified header states the length."""
    forged = tensor_file({"w": entry([2 * MB], 0, 8 * MB)})
    digest = hashlib.sha256(b"the real blob").hexdigest()
    backend.bodies[digest] = substituted(forged, 300 * MB)
    store = reader(backend)
    refused_naming(lambda: store.get_tensors(digest), digest, "declares", error=OversizedBlob)
    assert backend.handed <= len(forged) + 8 * MB + MB
    backend.bodies[digest] = substituted(forged, 8 * MB)  # exactly what it declares
    refused_naming(lambda: store.get_tensors(digest), digest, "corrupt", error=CorruptBlob)


def test_a_body_with_no_header_is_hashed_as_it_arrives_never_kept(
    backend: MemoryBackend,
) -> None:
    digest = hashlib.sha256(b"the real blob").hexdigest()
    backend.bodies[digest] = substituted(struct.pack("<Q", 2**40), 64 * MB)
    store = reader(backend)
    _, _, peak = measured(
        lambda: refused_naming(
            lambda: store.get_tensors(digest), digest, "corrupt", error=CorruptBlob
        )
    )
    assert peak < 4 * MB, f"{peak / MB:.1f} MB"


def test_a_lying_tensor_blob_is_still_a_bad_blob_on_a_backend(backend: MemoryBackend) -> None:
    """What the folder refuses by name, a backend's bounded read refuses the same way."""
    writer = BackendStore(backend)
    for data, says in [
        (tensor_file({"huge": entry([2**20, 2**20], 0, 2**42)}, bytes(16)), "past the end"),
        (tensor_file({"w": entry([0, 2**62, 2**62], 0, 0)}), "index"),
        (tensor_file(b"[" * 100_000), "not JSON"),
        (tensor_file(b"{}", length=2**40), "more than the"),
        (tensor_file({"a": entry([1], 0, 4)}, bytes(4), length=1000), "truncated"),
    ]:
        digest = writer.put(data)
        refused_naming(lambda d=digest: reader(backend).get_tensors(d), digest, says)


def test_describe_on_a_backend_takes_only_the_header(backend: MemoryBackend) -> None:
    store = BackendStore(backend)
    digest = store.put_tensors({"w": torch.zeros(256, 1024)})  # 1 MB of data
    backend.handed = 0
    assert reader(backend).describe(digest) == {"w": (torch.float32, (256, 1024))}
    assert backend.handed <= backend.chunk
    deep = store.put(tensor_file(b'{"a":' * 100_000))
    refused_naming(lambda: reader(backend).describe(deep), deep, "not JSON")


def test_a_backend_reads_a_good_value_back_whole(backend: MemoryBackend) -> None:
    value = {"export": {"net": {"w": torch.randn(300, 7), "b": torch.zeros(0, 5)}}, "size": 3}
    digest = BackendStore(backend).keep("v", value)
    for store in (BackendStore(backend), reader(backend)):
        back = store.recall("v")
        assert torch.equal(back["export"]["net"]["w"], value["export"]["net"]["w"])
        assert back["export"]["net"]["b"].shape == (0, 5) and back["size"] == 3
        assert store.recall_digest(digest)["size"] == 3  # the second time from memory
