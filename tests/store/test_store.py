"""The store, opened by hand, and claiming: real files, real processes (soma/store/folder/).

bytes by what they are, names that point at them, and both directions of each; a value
with tensors in it goes in and comes out alive, and a bare tensor is kept; something
nobody registered a codec for says which type it was and where; eight threads on one
name: exactly one wins, and the one told it won is the one written down; a claim leaves
nothing behind in the temporaries; a flipped byte and a lying header are caught. Other
interpreters writing the store (and killed mid-write) are tests/store/test_store_processes.py's,
the hash-and-write of large blobs tests/store/test_pipeline.py's. What every backend owes
(claims that eight processes race for among them) is tests/contract/'s.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import struct
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import blob_files, same, temporaries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soma.store import (
    BadBlob,
    BadDigest,
    BadName,
    CorruptBlob,
    NameConflict,
    NoCodec,
    NotText,
    Store,
    StoreError,
    UnknownDigest,
    UnknownName,
    register_codec,
    unregister_codec,
)

torch.set_num_threads(1)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


def a_value() -> dict:
    """Everything a value may hold, tensors of every kind included."""
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(4, 6, generator=g)
    return {
        "export": {
            "encoder": {"weight": torch.randn(5, 3, generator=g), "bias": torch.zeros(5)},
            "bn": {
                "running_mean": torch.randn(5, generator=g, dtype=torch.float64),
                "num_batches_tracked": torch.tensor(17),
            },
        },
        "size": 5000,
        "lr": 0.1,
        "odd floats": [float("nan"), float("inf"), float("-inf"), -0.0, 1e-310],
        "big int": 2**70,
        "text": "héllo / wörld \u2603",
        "flags": [True, False, None],
        "pair": (1, "two", (3.0,)),
        "$escaped": {"$tensor": "not a tag", "$tensors": [1]},
        "empty": {"list": [], "dict": {}, "tuple": ()},
        "loose": [
            torch.tensor(3.5),  # 0-dim
            torch.empty(0, 3),  # no elements
            wide.t(),  # not contiguous
            wide[:, 1::2],  # a strided view of part of a storage
            torch.arange(6, dtype=torch.int8).reshape(2, 3),
            torch.tensor([True, False, True]),
            torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
            torch.tensor([1.5, -2.25], dtype=torch.float16),
            torch.tensor([1 + 2j], dtype=torch.complex64),
            torch.tensor([250], dtype=torch.uint8),
            torch.tensor([0.5, 448.0], dtype=torch.float8_e4m3fn),
            torch.nn.Parameter(torch.ones(2)),
        ],
        "beside": {"t": torch.ones(3), "n": 1},  # a dict that is not tensor-shaped
    }


# --- bytes -------------------------------------------------------------------------------


def test_put_then_get_gives_the_bytes_back_by_their_sha256(store: Store) -> None:
    for data in [b"", b"hello", bytes(range(256)) * 1000]:
        digest = store.put(data)
        assert digest == hashlib.sha256(data).hexdigest()
        assert store.get(digest) == data
        assert store.blob_path(digest) == store.directory / "blobs" / digest[:2] / digest
    assert store.put(bytearray(b"hello")) == store.put(memoryview(b"hello"))


def test_putting_what_is_already_there_writes_nothing(store: Store) -> None:
    digest = store.put(b"once")
    before = os.stat(store.blob_path(digest))
    time.sleep(0.01)
    assert store.put(b"once") == digest
    after = os.stat(store.blob_path(digest))
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert len(blob_files(store)) == 1 and temporaries(store) == []


def test_an_unknown_digest_is_refused_by_name(store: Store) -> None:
    missing = hashlib.sha256(b"never put").hexdigest()
    with pytest.raises(UnknownDigest, match=missing):
        store.get(missing)
    for not_a_digest in ["abc", missing.upper(), missing[:-1] + "g", 42]:
        with pytest.raises(BadDigest):
            store.get(not_a_digest)


# --- names -------------------------------------------------------------------------------


def test_names_point_at_blobs_both_directions(store: Store) -> None:
    digest = store.put(b"round 3")
    assert store.resolve("cifar/round/3/client/0") is None
    store.bind("cifar/round/3/client/0", digest)
    assert store.resolve("cifar/round/3/client/0") == digest
    assert store.get(store.resolve("cifar/round/3/client/0")) == b"round 3"
    assert store.bound() == ["cifar/round/3/client/0"]
    name_file = store.directory / "names" / "cifar" / "round" / "3" / "client" / "0"
    assert name_file.read_text() == digest + "\n"


def test_bound_lists_names_by_text_prefix_sorted(store: Store) -> None:
    digest = store.put(b"x")
    names = ["r/round/3/client/1", "r/round/3/client/0", "r/round/30/average", "r/round/3/avg"]
    for name in names:
        store.bind(name, digest)
    assert store.bound() == sorted(names)
    assert store.bound("r/round/3/") == [
        "r/round/3/avg",
        "r/round/3/client/0",
        "r/round/3/client/1",
    ]
    assert store.bound("r/round/3") == sorted(names)
    assert store.bound("r/round/3/cl") == ["r/round/3/client/0", "r/round/3/client/1"]
    assert store.bound("r/round/3/client/0") == ["r/round/3/client/0"]
    assert store.bound("nothing/") == [] and store.bound("r/round/3/client/0/") == []
    (store.directory / "names" / "r" / ".nfs000123").write_text("an NFS silly rename")
    assert store.bound("r/") == sorted(names)
    with pytest.raises(BadName):
        store.bound("r/../")


def test_bind_replaces(store: Store) -> None:
    first, second = store.put(b"first"), store.put(b"second")
    store.bind("run/average", first)
    store.bind("run/average", second)
    assert store.resolve("run/average") == second
    assert temporaries(store) == []


def test_bind_and_claim_refuse_a_digest_not_in_the_store(store: Store) -> None:
    missing = hashlib.sha256(b"not here").hexdigest()
    for op in (store.bind, store.claim):
        with pytest.raises(UnknownDigest, match=missing):
            op("a/name", missing)
        with pytest.raises(BadDigest):
            op("a/name", "not-a-digest")
    assert store.bound() == [] and temporaries(store) == []


REFUSED_NAMES = {
    "empty": "",
    "absolute": "/etc/passwd",
    "dot segment": "a/./b",
    "dot-dot segment": "a/../b",
    "only dot-dot": "..",
    "empty segment": "a//b",
    "trailing slash": "a/b/",
    "backslash": "a\\b",
    "NUL": "a\0b",
    "newline": "a\nb",
    "DEL": "a\x7fb",
    "C1 control": "a\x85b",
    "bidirectional override": "a\u202eb",
    "zero width space": "a\u200bb",
    "hidden segment": "a/.nfs0001",
    "segment too long": "a/" + "x" * 256,
    "lone surrogate": "a\ud800b",
    "not text": 3,
}


@pytest.mark.parametrize("why", sorted(REFUSED_NAMES))
def test_each_refused_name_is_refused_clearly(store: Store, why: str) -> None:
    name = REFUSED_NAMES[why]
    digest = store.put(b"x")
    for op in (
        lambda: store.bind(name, digest),
        lambda: store.claim(name, digest),
        lambda: store.resolve(name),
        lambda: store.keep(name, 1),
    ):
        with pytest.raises(BadName) as refused:
            op()
        assert isinstance(refused.value, ValueError) and isinstance(refused.value, StoreError)
        assert (
            repr(name) in str(refused.value) or "empty" in str(refused.value) or why == "not text"
        )
    assert store.bound() == [] and temporaries(store) == []


def test_a_name_cannot_also_be_a_folder_of_names(store: Store) -> None:
    digest = store.put(b"x")
    store.bind("a/b", digest)
    for op in (store.bind, store.claim):
        with pytest.raises(NameConflict, match="'a/b' is one"):
            op("a/b/c", digest)
        with pytest.raises(NameConflict, match="'a/b' is one"):
            op("a/b/c/d", digest)
    store.bind("x/y/z", digest)
    for op in (store.bind, store.claim):
        with pytest.raises(NameConflict, match=r"'x/y' is a folder of names \(e.g. 'x/y/z'\)"):
            op("x/y", digest)
    assert store.resolve("x/y") is None and store.resolve("a/b/c") is None
    assert store.bound() == ["a/b", "x/y/z"] and temporaries(store) == []


def test_resolve_and_bound_never_read_a_blob(store: Store) -> None:
    store.bind("run/round/0/client/0", store.put(b"weights"))
    blobs = store.directory / "blobs"
    blobs.rename(store.directory / "blobs-away")  # no blob can be read now
    try:
        assert store.resolve("run/round/0/client/0") == hashlib.sha256(b"weights").hexdigest()
        assert store.bound("run/round/0/") == ["run/round/0/client/0"]
    finally:
        (store.directory / "blobs-away").rename(blobs)


# --- values ------------------------------------------------------------------------------


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_a_value_with_tensors_goes_in_and_comes_out_alive(store: Store, lazy: bool) -> None:
    value = a_value()
    digest = store.keep("run/round/0/client/0", value)
    assert store.resolve("run/round/0/client/0") == digest
    same(value, store.recall("run/round/0/client/0", lazy=lazy))


def test_a_bare_tensor_is_kept(store: Store) -> None:
    tensor = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    store.keep("bare", tensor)
    same(tensor, store.recall("bare"))
    same(tensor, store.recall("bare", lazy=True))


def test_recalling_a_name_nobody_bound_is_refused(store: Store) -> None:
    with pytest.raises(UnknownName, match="'nobody/here'"):
        store.recall("nobody/here")


class Opaque:
    pass


Point = collections.namedtuple("Point", "x y")


@pytest.mark.parametrize(
    "value, where, what",
    [
        ({"export": {"net": [1, Opaque()]}}, 'value["export"]["net"][1]', "test_store.Opaque"),
        (Opaque(), "value", "test_store.Opaque"),
        ([(1, Point(1, 2))], "value[0][1]", "test_store.Point"),
        ({"sd": collections.OrderedDict(w=torch.ones(1))}, 'value["sd"]', "OrderedDict"),
        ({"n": __import__("numpy").float64(1.0)}, 'value["n"]', "numpy.float64"),
        ({"e": {"w": torch.ones(2, dtype=torch.complex128)}}, 'value["e"]["w"]', "complex128"),
        ([torch.ones(2).to_sparse()], "value[0]", "sparse"),
        ({"b": b"bytes"}, 'value["b"]', "bytes"),
    ],
)
def test_something_with_no_codec_says_its_type_and_where(
    store: Store, value: object, where: str, what: str
) -> None:
    with pytest.raises(NoCodec) as refused:
        store.keep("refused", value)
    assert where in str(refused.value) and what in str(refused.value)
    assert isinstance(refused.value, TypeError)
    assert store.bound() == [] and blob_files(store) == []  # refused before writing anything


def test_a_value_that_contains_itself_is_refused(store: Store) -> None:
    loop: list = [1]
    loop.append({"again": loop})
    with pytest.raises(NoCodec, match=r'value\[1\]\["again"\] contains itself'):
        store.keep("loop", loop)


@pytest.mark.parametrize(
    "value, key, where",
    [
        ({1: "one"}, "1", "value"),
        (
            {"export": {"net": {0: torch.ones(1), "1": torch.ones(1)}}},
            "0",
            'value["export"]["net"]',
        ),
        ([{"ok": {(1, 2): None}}], "(1, 2)", 'value[0]["ok"]'),
        ({"a": {None: 1}}, "None", 'value["a"]'),
    ],
)
def test_keys_that_are_not_text_are_refused_with_the_key_named(
    store: Store, value: object, key: str, where: str
) -> None:
    with pytest.raises(NotText) as refused:
        store.keep("refused", value)
    assert f"key {key} " in str(refused.value) and f"in {where} " in str(refused.value)
    assert blob_files(store) == []


@dataclasses.dataclass
class Fit:
    """A user's own type, with a tensor inside it."""

    slope: torch.Tensor
    label: str


def test_a_registered_codec_round_trips_and_an_unregistered_one_is_refused(store: Store) -> None:
    register_codec(
        Fit,
        "tests.fit",
        encode=lambda fit: {"slope": fit.slope, "label": fit.label},
        decode=lambda d: Fit(d["slope"], d["label"]),
    )
    try:
        value = {"fits": [Fit(torch.tensor([1.0, 2.0]), "a"), Fit(torch.tensor([3.0]), "b")]}
        store.keep("fits", value)
        back = store.recall("fits")
        assert [type(f) for f in back["fits"]] == [Fit, Fit]
        for mine, theirs in zip(value["fits"], back["fits"], strict=True):
            same(mine.slope, theirs.slope)
            assert mine.label == theirs.label
        with pytest.raises(ValueError, match="already"):
            register_codec(Fit, "tests.other", lambda f: None, lambda d: None)
        with pytest.raises(ValueError, match="kept by the store itself"):
            register_codec(dict, "tests.dict", lambda f: None, lambda d: None)
    finally:
        unregister_codec("tests.fit")
    with pytest.raises(NoCodec, match=r"'tests.fit', which is not registered"):
        store.recall("fits")
    with pytest.raises(NoCodec, match="test_store.Fit"):
        store.keep("fits", value)


def test_the_same_value_is_the_same_digest_whatever_order_it_was_built_in(store: Store) -> None:
    value = a_value()
    backwards = {key: value[key] for key in reversed(list(value))}
    assert store.put_value(value) == store.put_value(backwards) == store.put_value(a_value())


def test_lazy_recall_equals_eager_and_maps_the_files_copy_on_write(store: Store) -> None:
    value = a_value()
    store.keep("v", value)
    eager, lazy = store.recall("v"), store.recall("v", lazy=True)
    same(eager, lazy)
    weight = lazy["export"]["encoder"]["weight"]
    weight += 100  # copy-on-write: the file does not change
    same(value, store.recall("v", lazy=True))
    same(value, store.recall("v"))
    for path in blob_files(store):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name


def rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_lazy_tensors_are_file_backed_pages_not_anonymous_memory(store: Store) -> None:
    store.keep("big", {"export": {"net": {"w": torch.rand(16 << 20)}}, "size": 1})  # 64 MB
    before = rss_anon()
    value = store.recall("big", lazy=True)
    assert float(value["export"]["net"]["w"].sum()) > 0  # every page touched
    assert rss_anon() - before < 16 << 20


def test_recall_each_yields_values_one_at_a_time_for_a_streamed_fedavg(store: Store) -> None:
    from soma.aggregate import fedavg

    g = torch.Generator().manual_seed(3)
    names = []
    for k in range(4):
        export = {"net": {"w": torch.randn(8, 8, generator=g), "b": torch.randn(8, generator=g)}}
        names.append(f"run/round/0/client/{k}")
        store.keep(names[-1], {"export": export, "size": k + 1})
    records = store.recall_each(names)
    assert not isinstance(records, list)
    streamed = fedavg((r["export"], r["size"]) for r in records)
    loaded = [store.recall(n) for n in names]
    same(streamed, fedavg([r["export"] for r in loaded], sizes=[r["size"] for r in loaded]))
    digests = [store.resolve(n) for n in names]
    same(list(store.recall_each_digest(digests)), loaded)


def test_tensor_blobs_are_plain_safetensors_files(store: Store) -> None:
    from safetensors.torch import load_file, save

    tensors = {"b": torch.arange(5, dtype=torch.int16), "a": torch.randn(2, 3)}
    digest = store.put_tensors(tensors)
    same(tensors, load_file(store.blob_path(digest)))
    theirs = store.put(save({"x": torch.ones(3, dtype=torch.float64), "y": torch.zeros(2)}))
    same({"x": torch.ones(3, dtype=torch.float64), "y": torch.zeros(2)}, store.get_tensors(theirs))


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int8]
DTYPES += [torch.bool, torch.bfloat16, torch.uint8]  # torch makes bool and bfloat16, numpy the rest
TENSORS = st.builds(
    lambda dtype, shape, seed: (
        torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 10
    ).to(dtype),
    st.sampled_from(DTYPES),
    st.lists(st.integers(0, 3), max_size=3),
    st.integers(0, 2**16),
)
KEYS = st.text(max_size=5) | st.sampled_from(["$tensor", "$dict", "$", "__metadata__"])
VALUES = st.recursive(
    SCALARS | TENSORS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(KEYS, inner, max_size=4)
        | st.dictionaries(KEYS, TENSORS, min_size=1, max_size=3)
    ),
    max_leaves=10,
)


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store(tmp_path_factory.mktemp("property") / "store")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES)
def test_any_value_comes_back_the_same_and_twice_is_one_digest(
    shared_store: Store, value: object
) -> None:
    digest = shared_store.put_value(value)
    same(value, shared_store.recall_digest(digest))
    same(value, shared_store.recall_digest(digest, lazy=True))
    assert shared_store.put_value(value) == digest


# --- what was written is what is read ----------------------------------------------------


def flip_a_byte(path: Path, at: int) -> str:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def test_a_flipped_byte_in_a_blob_is_caught_on_read(store: Store) -> None:
    digest = store.put(b"the weights of round 3" * 100)
    actual = flip_a_byte(store.blob_path(digest), 1000)
    with pytest.raises(CorruptBlob) as refused:
        Store(store.directory).get(
            digest
        )  # another reader: the writer reads its small blobs from memory (folder.write_cache)
    message = str(refused.value)
    assert str(store.blob_path(digest)) in message and digest in message and actual in message
    assert (refused.value.expected, refused.value.actual) == (digest, actual)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_a_flipped_byte_in_a_tensor_blob_is_caught_on_recall(store: Store, lazy: bool) -> None:
    store.keep("v", {"export": {"net": {"w": torch.randn(64, 64)}}, "size": 1})
    largest = max(blob_files(store), key=lambda p: p.stat().st_size)
    actual = flip_a_byte(largest, largest.stat().st_size - 7)
    with pytest.raises(CorruptBlob) as refused:
        Store(store.directory).recall(
            "v", lazy=lazy
        )  # another reader: the writer reads its small blobs from memory (folder.write_cache)
    assert str(largest) in str(refused.value) and largest.name in str(refused.value)
    assert actual in str(refused.value)


def safetensors_bytes(header: object, data: bytes, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def f32(shape: list[int], begin: int, end: int, dtype: str = "F32") -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


LYING = {
    "shorter than its length": (b"\x05\x00", "shorter than the 8-byte header length"),
    "header length past the end": (safetensors_bytes(b"{}", b"", length=1000), "truncated"),
    "header truncated": (safetensors_bytes(b'{"w": {"dtype": "F3', b""), "not JSON"),
    "header not an object": (safetensors_bytes(b"[1, 2]", b""), "not an object"),
    "offsets past the end": (safetensors_bytes({"w": f32([4], 0, 16)}, bytes(8)), "past the end"),
    "wrong size for its dtype": (
        safetensors_bytes({"w": f32([4], 0, 8)}, bytes(8)),
        "span 8 bytes",
    ),
    "unknown dtype": (safetensors_bytes({"w": f32([1], 0, 16, "F128")}, bytes(16)), "'F128'"),
    "dtype not text": (
        safetensors_bytes({"w": f32([1], 0, 4) | {"dtype": [4]}}, bytes(4)),
        "dtype",
    ),
    "header nested too deep": (safetensors_bytes(b"[" * 100000, b""), "not JSON"),
    "negative shape": (safetensors_bytes({"w": f32([-1], 0, 0)}, b""), "non-negative"),
    "absurd shape": (safetensors_bytes({"w": f32([2**62, 2**62], 0, 0)}, b""), "span 0 bytes"),
    "overlapping tensors": (
        safetensors_bytes({"a": f32([2], 0, 8), "b": f32([2], 4, 12)}, bytes(12)),
        "overlaps",
    ),
    "a gap between tensors": (
        safetensors_bytes({"a": f32([1], 0, 4), "b": f32([1], 8, 12)}, bytes(12)),
        "gap",
    ),
    "bytes belonging to nobody": (safetensors_bytes({"a": f32([1], 0, 4)}, bytes(8)), "no tensor"),
    "a key twice": (
        safetensors_bytes(
            b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
            b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
            bytes(4),
        ),
        "twice",
    ),
    "bool that is not 0 or 1": (
        safetensors_bytes({"a": f32([2], 0, 2, "BOOL")}, b"\x00\x07"),
        "other than 0 and 1",
    ),
    "offsets not a pair": (
        safetensors_bytes({"a": f32([1], 0, 4) | {"data_offsets": [0]}}, bytes(4)),
        "[begin, end]",
    ),
}


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("lie", sorted(LYING))
def test_a_truncated_or_lying_safetensors_blob_is_refused_naming_it(
    store: Store, lie: str, lazy: bool
) -> None:
    data, says = LYING[lie]
    digest = store.put(data)
    with pytest.raises(BadBlob) as refused:
        store.get_tensors(digest, lazy=lazy)
    assert str(store.blob_path(digest)) in str(refused.value) and says in str(refused.value)
    record = store.put(json.dumps({"soma": 1, "value": {"export": {"$tensors": digest}}}).encode())
    store.bind("lying", record)
    with pytest.raises(BadBlob, match=digest):
        store.recall("lying", lazy=lazy)


def test_a_name_bound_to_something_that_is_not_a_value_is_refused(store: Store) -> None:
    store.bind("raw", store.put(b"just bytes"))
    with pytest.raises(BadBlob, match="not a value kept by Store.keep"):
        store.recall("raw")


# --- claiming ----------------------------------------------------------------------------


def test_a_claim_leaves_nothing_behind_in_the_temporaries(store: Store) -> None:
    digest = store.put(b"me")
    assert temporaries(store) == []
    assert store.claim("a/b", digest)
    assert temporaries(store) == []
    assert not store.claim("a/b", digest)
    assert temporaries(store) == []
    with pytest.raises(NameConflict):
        store.claim("a/b/c", digest)
    assert temporaries(store) == []


def race_threads(store: Store, name: str, mine: list[str]) -> list[bool | None]:
    """Each thread claims `name` with its own digest, all released by one barrier."""
    start = threading.Barrier(len(mine))
    told: list[bool | None] = [None] * len(mine)

    def racer(i: int) -> None:
        start.wait()
        told[i] = store.claim(name, mine[i])

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(len(mine))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return told


def test_race_eight_threads_for_one_name_exactly_one_wins_and_is_written_down(
    store: Store,
) -> None:
    for attempt in range(3):
        name = f"run/round/{attempt}/averaging"
        mine = [store.put(f"{attempt}: thread {i}".encode()) for i in range(8)]
        told = race_threads(store, name, mine)
        winners = [i for i in range(8) if told[i] is True]
        assert told.count(None) == 0
        assert len(winners) == 1, f"{len(winners)} of the 8 racers were told they had it"
        assert store.resolve(name) == mine[winners[0]], "the winner is not the one written down"
        assert temporaries(store) == []


# --- the store's folders ---------------------------------------------------------------


def test_eight_threads_opening_one_new_store_folder_together_each_open_it(tmp_path) -> None:
    """Clients started together open a store that is not there yet: each makes its folders,
    and a folder another one made while this one looked is a folder, not "something other
    than a folder" (a run's four clients were refused so, once in a suite)."""
    refused: list[str] = []
    ready = threading.Barrier(8)

    def open_each(rounds: int) -> None:
        for r in range(rounds):
            ready.wait()
            try:
                Store(tmp_path / str(r) / "store")
            except Exception as error:  # noqa: BLE001 (each refusal is counted, not raised)
                refused.append(repr(error))

    threads = [threading.Thread(target=open_each, args=(100,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert refused == [], f"{len(refused)} of 800 opens refused: {refused[:2]}"


def test_sweep_removes_only_old_temporaries(store: Store) -> None:
    old, new = store.directory / "tmp" / "old.blob", store.directory / "tmp" / "new.blob"
    old.write_bytes(b"left by a killed writer")
    new.write_bytes(b"being written")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    cutoff = time.time() - 3600  # gc's rule decides which are abandoned (soma.health)
    swept = store.sweep_temporaries(cutoff, lambda t: t.mtime < cutoff, dry_run=False)
    assert (swept.removed, swept.kept) == (1, 1)
    assert temporaries(store) == ["new.blob"]


def test_store_layout_is_what_the_docs_say(store: Store) -> None:
    assert sorted(os.listdir(store.directory)) == ["blobs", "names", "tmp"]
    digest = store.put(b"x")
    assert (store.directory / "blobs" / digest[:2] / digest).read_bytes() == b"x"
    assert not os.access(store.blob_path(digest), os.W_OK) or os.geteuid() == 0
    assert store.blob_path(digest).stat().st_mode & 0o222 == 0
