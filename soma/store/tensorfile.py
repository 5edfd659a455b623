"""The safetensors format, written as a stream and read without trusting the header.

Written: `<u64 little-endian header length><JSON header, space-padded to 8 bytes><data>`,
the header canonical (keys sorted, no whitespace, no `__metadata__`, so no timestamps) and
the data laid out by (itemsize descending, key), which keeps every tensor aligned to its
own itemsize. The same tensors therefore always give the same bytes, in any process, and
the files are ordinary safetensors files (`safetensors.torch.load_file` reads them).

Writing never builds the file in memory: `TensorPlan.chunks()` yields the header and
then each tensor's own memory, a chunk at a time (a tensor that is not already a
contiguous CPU tensor is copied, one at a time).

Reading (`read_header`, `tensors_from`) checks everything before touching a tensor: the
header length fits the file, the header is a JSON object without duplicate keys, every
dtype is known, every shape is a list of non-negative integers, every tensor's byte range
is exactly its shape times its itemsize, and the ranges tile the data with no gap and no
overlap. Anything else is `BadBlob` naming the blob — never an out-of-bounds read.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

import torch

from soma.store.errors import BadBlob

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

CHUNK = 16 << 20  # bytes handed to the hash and to write(2) at a time
MAX_HEADER = 100 << 20  # what safetensors itself accepts


def tensor_problem(tensor: torch.Tensor) -> str | None:
    """Why `tensor` cannot be written as safetensors, or None if it can."""
    if tensor.layout != torch.strided:
        return f"a {tensor.layout} tensor; only dense (strided) tensors are kept"
    if tensor.dtype not in NAMES:
        return f"a {tensor.dtype} tensor; safetensors has no dtype for it"
    if tensor.is_quantized or tensor.device.type == "meta":
        return "a quantized or meta tensor, which has no plain bytes to keep"
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


def read_header(buffer: memoryview, where: str) -> list[Entry]:
    """Parse and check the header of the safetensors file in `buffer` (the whole file)."""
    size = len(buffer)

    def bad(why: str) -> BadBlob:
        return BadBlob(f"blob {where} is not a valid safetensors file: {why}")

    if size < 8:
        raise bad(f"it is {size} bytes, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", buffer[:8])
    if length > size - 8:
        raise bad(f"its header claims {length} bytes but only {size - 8} follow (truncated?)")
    if length > MAX_HEADER:
        raise bad(f"its header claims {length} bytes, more than the {MAX_HEADER} allowed")
    try:
        header = json.loads(bytes(buffer[8 : 8 + length]), object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise bad(f"its header is not JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(header, dict):
        raise bad(f"its header is a JSON {type(header).__name__}, not an object")
    start = 8 + length
    entries = []
    for key, info in header.items():
        if key == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise bad("its __metadata__ is not a map of text to text")
            continue
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise bad(f"tensor {key!r} is not described by exactly dtype, shape, data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise bad(f"tensor {key!r} has an unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise bad(f"tensor {key!r} has shape {shape!r}, not a list of non-negative integers")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise bad(f"tensor {key!r} has data_offsets {offsets!r}, not [begin, end]")
        torch_dtype = DTYPES[dtype]
        expected = math.prod(shape) * torch_dtype.itemsize
        if offsets[1] - offsets[0] != expected:
            raise bad(
                f"tensor {key!r} is {dtype} {shape} ({expected} bytes) but its data_offsets "
                f"{offsets} span {offsets[1] - offsets[0]} bytes"
            )
        entries.append(
            Entry(key, torch_dtype, tuple(shape), start + offsets[0], start + offsets[1])
        )
    position = start
    for entry in sorted(entries, key=lambda e: (e.begin, e.end)):
        if entry.begin != position:
            why = "overlaps the one before" if entry.begin < position else "leaves a gap before it"
            raise bad(f"tensor {entry.key!r} {why} (at byte {entry.begin - start} of the data)")
        position = entry.end
    if position != size:
        if position > size:
            raise bad(
                f"its tensors need {position - start} bytes of data but the file has "
                f"{size - start} (truncated, or offsets past the end)"
            )
        raise bad(f"{size - position} bytes after its last tensor belong to no tensor")
    return entries


def tensors_from(base: torch.Tensor, entries: list[Entry], where: str) -> dict[str, torch.Tensor]:
    """Tensors viewing `base` (the whole file as one uint8 tensor) at the checked `entries`.

    Views share `base`'s memory (and keep it alive); one whose offset is not a multiple
    of its itemsize — never one this module wrote — is copied to be aligned.
    """
    if sys.byteorder != "little":  # pragma: no cover - no big-endian machines here
        raise BadBlob(f"blob {where}: reading safetensors on a big-endian machine is not done")
    out: dict[str, torch.Tensor] = {}
    for e in entries:
        if e.begin == e.end:
            out[e.key] = torch.empty(e.shape, dtype=e.dtype)
            continue
        raw = base[e.begin : e.end]
        if e.dtype == torch.bool and bool((raw > 1).any()):
            raise BadBlob(f"blob {where}: bool tensor {e.key!r} holds bytes other than 0 and 1")
        if e.begin % e.dtype.itemsize:
            raw = raw.clone()
        out[e.key] = raw.view(e.dtype).reshape(e.shape)
    return out


def describe(f: BinaryIO, where: str) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """Each tensor's dtype and shape, from the header alone (no data read, nothing verified),
    of blob `where` open as `f` (`Store.describe` opens it as every read: never via a link).

    For checking that several exports are the same network before anything is claimed or
    computed: cheap on a shared folder, and whatever later reads the data verifies it.
    """
    head = f.read(8)
    if len(head) < 8:
        raise BadBlob(f"blob {where} is not a valid safetensors file: shorter than 8 bytes")
    (length,) = struct.unpack("<Q", head)
    if length > MAX_HEADER:
        raise BadBlob(f"blob {where}: its header claims {length} bytes, more than allowed")
    raw = f.read(length)
    try:
        header = json.loads(raw)
        out = {}
        for key, info in header.items():
            if key != "__metadata__":
                out[key] = (DTYPES[info["dtype"]], tuple(int(d) for d in info["shape"]))
        return out
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise BadBlob(f"blob {where} is not a valid safetensors file: {exc}") from None
