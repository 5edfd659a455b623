"""The safetensors format, written as a stream and read without trusting the header.

Written: `<u64 little-endian header length><JSON header, space-padded to 8 bytes><data>`,
the header canonical (keys sorted, no whitespace, no `__metadata__`, so no timestamps) and
the data laid out by (itemsize descending, key), which keeps every tensor aligned to its
own itemsize. The same tensors therefore always give the same bytes, in any process, and
the files are ordinary safetensors files (`safetensors.torch.load_file` reads them).

Writing never builds the file in memory: `TensorPlan.chunks()` yields the header and
then each tensor's own memory, a chunk at a time (a tensor that is not already a
contiguous CPU tensor is copied, one at a time).

Reading (`read_header`, `tensors_from`; `describe` from the header alone) checks everything
before touching a tensor, with exact Python integers: the header length fits the file and a
cap, the header's size is counted before it is parsed (objects, commas: see the caps below),
it is a JSON object without duplicate keys, every dtype is known, every shape is a list of
at most MAX_DIMS non-negative integers that torch can index, every tensor's byte range is
exactly its shape times its itemsize, and the ranges tile the data with no gap and no
overlap. Anything else, and whatever torch or the JSON parser still refuses, is `BadBlob`
naming the blob (and the tensor's key) — never an out-of-bounds read, a torch error or a
RecursionError. `declared_size` is the file's length as its header states it, which lets a
reader (soma.store.backend) stop reading there.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

import numpy
import torch

from soma.store.errors import BadBlob
from soma.store.hashing import CHUNK as CHUNK  # re-exported: where it always was

# safetensors dtype name -> torch dtype (every one torch and safetensors both have)
_NAMED: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "C64": torch.complex64,
}
for _name, _attr in [
    ("F8_E4M3", "float8_e4m3fn"),
    ("F8_E5M2", "float8_e5m2"),
    ("F8_E4M3FNUZ", "float8_e4m3fnuz"),
    ("F8_E5M2FNUZ", "float8_e5m2fnuz"),
    ("U16", "uint16"),
    ("U32", "uint32"),
    ("U64", "uint64"),
]:
    if hasattr(torch, _attr):
        _NAMED[_name] = getattr(torch, _attr)
DTYPES: dict[str, torch.dtype] = _NAMED
NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in _NAMED.items()}

# The numpy dtypes that hold the same bytes as these torch dtypes: a tensor of one is made
# as a numpy view of the file, one call where torch's slice, view and reshape are three (a
# small model's blob: ~4 tensors read a contribution); the others by torch (`_tensor_at`).
_NUMPY: dict[torch.dtype, numpy.dtype] = {
    dtype: numpy.dtype(name)
    for dtype, name in [
        (torch.float64, "float64"),
        (torch.float32, "float32"),
        (torch.float16, "float16"),
        (torch.int64, "int64"),
        (torch.int32, "int32"),
        (torch.int16, "int16"),
        (torch.int8, "int8"),
        (torch.uint8, "uint8"),
        (torch.complex64, "complex64"),
    ]
}

MAX_HEADER = 100 << 20  # what safetensors itself accepts


def tensor_problem(tensor: torch.Tensor) -> str | None:
    """Why `tensor` cannot be written as safetensors, or None if it can."""
    if tensor.layout != torch.strided:
        return f"a {tensor.layout} tensor; only dense (strided) tensors are kept"
    if tensor.dtype not in NAMES:
        return f"a {tensor.dtype} tensor; safetensors has no dtype for it"
    if tensor.is_quantized or tensor.device.type == "meta":
        return "a quantized or meta tensor, which has no plain bytes to keep"
    if tensor.dim() > MAX_DIMS:
        return f"a tensor of {tensor.dim()} dimensions; a file read back allows {MAX_DIMS}"
    return None


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes as one memoryview, without a copy when it is contiguous on CPU."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.to("cpu")
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    t = t.contiguous()
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


@dataclass
class TensorPlan:
    """A safetensors file about to be written: its header and, in order, its tensors."""

    header: bytes  # the length prefix and the padded JSON
    ordered: list[torch.Tensor]
    nbytes: int  # of the whole file

    def chunks(self) -> Iterator[memoryview]:
        """The file's bytes, a chunk at a time, straight from the tensors' memory."""
        yield memoryview(self.header)
        for tensor in self.ordered:
            data = _tensor_bytes(tensor)
            for start in range(0, len(data), CHUNK):
                yield data[start : start + CHUNK]


def plan(tensors: Mapping[str, torch.Tensor]) -> TensorPlan:
    """Lay out `tensors` (text keys, checked tensors) as one deterministic safetensors file."""
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header: dict[str, object] = {}
    offset = 0
    for key in order:
        t = tensors[key]
        size = t.numel() * t.element_size()
        header[key] = {
            "dtype": NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    raw = text.encode("utf-8")
    raw += b" " * (-(8 + len(raw)) % 8)
    return TensorPlan(
        struct.pack("<Q", len(raw)) + raw, [tensors[k] for k in order], 8 + len(raw) + offset
    )


# --- reading: every number checked before torch sees one ----------------------------------
#
# Caps a real model never reaches, each checked before the work it bounds is done:
#
# - MAX_HEADER (above): the header's length, from the first 8 bytes, before it is read;
# - MAX_TENSORS: tensors one file may describe. A 1,000-layer LLM has ~10^4 tensors, and a
#   blob here is one node of an export (or a record's loose tensors), so 10^5 is ten times
#   the largest model whole. Counted as the header's `{` before it is parsed: each tensor is
#   described by an object, so the count over-counts only by braces inside keys. Reading a
#   file of 10^5 tensors costs ~3 s of CPU (one view each); 10^6 was 77-100 s and +640 MB;
# - MAX_DIMS: dimensions of one tensor; NumPy's own limit (NPY_MAXDIMS in NumPy 2), so no
#   safetensors file NumPy can write has more. Real tensors have up to ~8;
# - COMMAS_PER_OBJECT: with the objects counted, the header's commas (every element of every
#   list and object but the first) are at most MAX_DIMS + 4 per object: a tensor's entry has
#   its separator, two between its three fields, one in its offsets and one per dimension
#   past the first. So what json.loads builds is proportional to the tensors described, never
#   to a long list hidden in a short header (a `[0,0,...]` of 100 MB would be 400 MB parsed);
# - INDEXABLE: torch's sizes, strides and byte counts are int64, so every tensor's shape,
#   with its zero dimensions counted as 1 (what its strides are made of) and times its
#   itemsize, stays below 2**63: `[0, 2**62, 2**62]` holds no byte yet overflows torch.
MAX_TENSORS = 100_000
MAX_DIMS = 64
COMMAS_PER_OBJECT = MAX_DIMS + 4
INDEXABLE = 1 << 63


@dataclass(frozen=True)
class Entry:
    key: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int  # absolute offsets in the file
    end: int


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice")
        out[key] = value
    return out


def _bad(where: str, why: str) -> BadBlob:
    return BadBlob(f"blob {where} is not a valid safetensors file: {why}")


def header_length(head: bytes | memoryview, where: str) -> int:
    """The header length a file's first 8 bytes state, refused past MAX_HEADER: known before
    anything more is read, so that a lying length costs nothing."""
    if len(head) < 8:
        raise _bad(where, f"it is {len(head)} bytes, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", head[:8])
    if length > MAX_HEADER:
        raise _bad(where, f"its header claims {length} bytes, more than the {MAX_HEADER} allowed")
    return length


def parse_header(raw: bytes | bytearray, where: str) -> dict[str, object]:
    """The header's JSON object, its objects and commas counted before it is parsed (see
    MAX_TENSORS, COMMAS_PER_OBJECT): a header describing a million tensors is refused in the
    time of two byte counts, never parsed."""
    objects = raw.count(b"{")
    if objects > MAX_TENSORS + 2:  # the header itself and its __metadata__
        raise _bad(
            where,
            f"its header holds up to {objects} JSON objects, one per tensor: more than the "
            f"{MAX_TENSORS} tensors allowed",
        )
    commas = raw.count(b",")
    if commas > max(objects, 1) * COMMAS_PER_OBJECT:
        raise _bad(
            where,
            f"its header has {commas} commas for {objects} objects, more than the "
            f"{COMMAS_PER_OBJECT} per object that {MAX_DIMS} dimensions need",
        )
    try:
        header = json.loads(raw, object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _bad(where, f"its header is not JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(header, dict):
        raise _bad(where, f"its header is a JSON {type(header).__name__}, not an object")
    return header


def check_entry(key: str, info: object) -> tuple[torch.dtype, tuple[int, ...], int, int]:
    """A tensor's dtype, shape and data offsets (relative to the data), checked with exact
    integers before torch sees any of them; ValueError saying why not (the caller names the
    blob). Pure: no I/O, no torch call but the dtype's itemsize."""
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise ValueError(f"tensor {key!r} is not described by exactly dtype, shape, data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"tensor {key!r} has an unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"tensor {key!r} has shape {shape!r}, not a list of non-negative integers")
    if len(shape) > MAX_DIMS:
        raise ValueError(f"tensor {key!r} has {len(shape)} dimensions, more than {MAX_DIMS}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise ValueError(f"tensor {key!r} has data_offsets {offsets!r}, not [begin, end]")
    itemsize = DTYPES[dtype].itemsize
    expected = math.prod(shape) * itemsize
    if offsets[1] - offsets[0] != expected:
        raise ValueError(
            f"tensor {key!r} is {dtype} {shape} ({expected} bytes) but its data_offsets "
            f"{offsets} span {offsets[1] - offsets[0]} bytes"
        )
    if math.prod(max(d, 1) for d in shape) * itemsize >= INDEXABLE:
        raise ValueError(
            f"tensor {key!r} is {dtype} {shape}: its strides and sizes pass 2**63 bytes, "
            "more than a tensor can index"
        )
    return DTYPES[dtype], tuple(shape), offsets[0], offsets[1]


def check_layout(header: dict[str, object], start: int, size: int | None) -> list[Entry]:
    """The tensors `header` describes, at absolute offsets from `start` (where its data
    begins), their ranges tiling the data with no gap and no overlap, and ending at `size`
    (the file's length; None: not known, as for a header read alone). ValueError saying
    why not. Pure."""
    entries = []
    for key, info in header.items():
        if key == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ValueError("its __metadata__ is not a map of text to text")
            continue
        dtype, shape, begin, end = check_entry(key, info)
        entries.append(Entry(key, dtype, shape, start + begin, start + end))
    if len(entries) > MAX_TENSORS:
        raise ValueError(
            f"it describes {len(entries)}, more than the {MAX_TENSORS} tensors allowed"
        )
    position = start
    for entry in sorted(entries, key=lambda e: (e.begin, e.end)):
        if entry.begin != position:
            why = "overlaps the one before" if entry.begin < position else "leaves a gap before it"
            raise ValueError(
                f"tensor {entry.key!r} {why} (at byte {entry.begin - start} of the data)"
            )
        position = entry.end
    if size is not None and position > size:
        raise ValueError(
            f"its tensors need {position - start} bytes of data but the file has "
            f"{size - start} (truncated, or offsets past the end)"
        )
    if size is not None and position < size:
        raise ValueError(f"{size - position} bytes after its last tensor belong to no tensor")
    return entries


def layout(length: int, raw: bytes | bytearray, where: str, size: int | None) -> list[Entry]:
    """The checked tensors of a file whose header is `length` bytes long and `raw` (what of
    it there is) and whose whole length is `size` (None: not known); `BadBlob` naming the
    blob, and the tensor."""
    if len(raw) < length:
        raise _bad(
            where, f"its header claims {length} bytes but only {len(raw)} follow (truncated?)"
        )
    key = (length, bytes(raw), size)
    found = _LAYOUTS.get(key)
    if found is None:
        header = parse_header(raw, where)
        try:
            found = tuple(check_layout(header, 8 + length, size))
        except ValueError as exc:
            raise _bad(where, str(exc)) from None
        if len(_LAYOUTS) >= 1024:
            _LAYOUTS.clear()
        _LAYOUTS[key] = found
    return list(found)


# The layouts of the latest headers checked, by their bytes and the file's length: parsing
# and checking is a pure function of them, and a round's exports share a few headers (every
# client's blob of one node describes the same tensors at the same offsets), read ~4 times a
# contribution. Only what passed is kept; a refusal is made again, naming its blob.
_LAYOUTS: dict[tuple[int, bytes, int | None], tuple[Entry, ...]] = {}


def declared_size(length: int, raw: bytes | bytearray, where: str) -> int:
    """The file's whole length as its header (`length` bytes, `raw`) declares it, every
    tensor checked: what a read may stop at (`BadBlob` if the header is not one)."""
    entries = layout(length, raw, where, None)
    return max((e.end for e in entries), default=8 + length)


def read_header(buffer: memoryview, where: str) -> list[Entry]:
    """Parse and check the header of the safetensors file in `buffer` (the whole file)."""
    size = len(buffer)
    if size < 8:
        raise _bad(where, f"it is {size} bytes, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", buffer[:8])
    if length > size - 8:
        raise _bad(
            where, f"its header claims {length} bytes but only {size - 8} follow (truncated?)"
        )
    header_length(buffer[:8], where)
    return layout(length, bytes(buffer[8 : 8 + length]), where, size)


def _tensor_at(base: torch.Tensor, e: Entry, where: str) -> torch.Tensor:
    if e.begin == e.end:
        return torch.empty(e.shape, dtype=e.dtype)
    raw = base[e.begin : e.end]
    if e.dtype == torch.bool and bool((raw > 1).any()):
        raise BadBlob(f"blob {where}: bool tensor {e.key!r} holds bytes other than 0 and 1")
    if e.begin % e.dtype.itemsize:
        raw = raw.clone()
    return raw.view(e.dtype).reshape(e.shape)


def tensors_from(base: torch.Tensor, entries: list[Entry], where: str) -> dict[str, torch.Tensor]:
    """Tensors viewing `base` (the whole file as one uint8 tensor) at the checked `entries`.

    Views share `base`'s memory (and keep it alive); one whose offset is not a multiple
    of its itemsize — never one this module wrote — is copied to be aligned. Whatever torch
    still refuses is `BadBlob` naming the blob and the tensor, never torch's own error.
    """
    if sys.byteorder != "little":  # pragma: no cover - no big-endian machines here
        raise BadBlob(f"blob {where}: reading safetensors on a big-endian machine is not done")
    out: dict[str, torch.Tensor] = {}
    array = None  # `base` as numpy sees it, for the dtypes numpy holds
    for e in entries:
        try:
            held = _NUMPY.get(e.dtype)
            if held is not None and e.begin < e.end and e.begin % held.itemsize == 0:
                array = base.numpy() if array is None else array
                out[e.key] = torch.from_numpy(array[e.begin : e.end].view(held).reshape(e.shape))
            else:
                out[e.key] = _tensor_at(base, e, where)
        except BadBlob:
            raise
        except (RuntimeError, TypeError, ValueError, OverflowError, IndexError) as exc:
            raise BadBlob(
                f"blob {where}: tensor {e.key!r} ({e.dtype} {list(e.shape)}) cannot be made: "
                f"{type(exc).__name__}: {exc}"
            ) from None
    return out


def _read_exactly(f: BinaryIO, n: int) -> bytes:
    """Up to `n` bytes of `f` (fewer only at its end), however the reads split."""
    parts, got = [], 0
    while got < n:
        part = f.read(n - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def describe_header(
    length: int, raw: bytes | bytearray, where: str, size: int | None = None
) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """Each tensor's dtype and shape from a file's header (`length` bytes, `raw`), every
    tensor checked as a read checks it, and against the file's length `size` when known."""
    return {e.key: (e.dtype, e.shape) for e in layout(length, raw, where, size)}


def describe(f: BinaryIO, where: str) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """Each tensor's dtype and shape, from the header alone (no data read, nothing verified),
    of blob `where` open as `f` (`Store.describe` opens it as every read: never via a link).

    For checking that several exports are the same network before anything is claimed or
    computed: cheap on a shared folder, and whatever later reads the data verifies it. The
    header is checked as a read checks it, against the file's length, so that a shape
    (2**40 elements) the file cannot hold is refused here and never planned for.
    """
    length = header_length(_read_exactly(f, 8), where)
    raw = _read_exactly(f, length)
    return describe_header(length, raw, where, os.fstat(f.fileno()).st_size)
