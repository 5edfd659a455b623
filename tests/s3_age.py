"""Age an object on the tests' S3 server: what `os.utime` to the past is for a folder's
file. gc judges ages by the server's clock against LastModified, which no S3 request can
set; SeaweedFS keeps it as its filer entry's mtime, which its filer's gRPC `UpdateEntry`
sets. The messages are built by hand (a few fields of filer.proto: LookupDirectoryEntry
{directory=1, name=2} -> {entry=1}; UpdateEntry {directory=1, entry=2}; Entry.attributes=4;
FuseAttributes.mtime=2, crtime=6), every other field passed through as it came.
"""

from __future__ import annotations

import json
import time
import urllib.request

import s3_bucket
from s3_bucket import BUCKET

_SERVICE = "/filer_pb.SeaweedFiler/"


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _encode(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """Each field: its number, its whole encoding, and (length-delimited) its payload."""
    out, i = [], 0
    while i < len(data):
        start = i
        tag, i = _varint(data, i)
        kind, payload = tag & 7, b""
        if kind == 0:
            _, i = _varint(data, i)
        elif kind == 1:
            i += 8
        elif kind == 5:
            i += 4
        elif kind == 2:
            n, i = _varint(data, i)
            payload, i = data[i : i + n], i + n
        else:
            raise ValueError(f"wire type {kind}")
        out.append((tag >> 3, data[start:i], payload))
    return out


def _message(number: int, payload: bytes) -> bytes:
    return _encode(number << 3 | 2) + _encode(len(payload)) + payload


def _set_times(path: str, when: int) -> None:
    import grpc  # with tensorboard (the test extra)

    folder, _, name = path.rpartition("/")

    def same(raw: bytes) -> bytes:  # raw bytes in and out
        return raw

    with grpc.insecure_channel(s3_bucket.FILER_GRPC) as channel:
        look = channel.unary_unary(_SERVICE + "LookupDirectoryEntry", same, same)
        update = channel.unary_unary(_SERVICE + "UpdateEntry", same, same)
        answer = look(_message(1, folder.encode()) + _message(2, name.encode()))
        (entry,) = [p for n, _, p in _fields(answer) if n == 1]
        out = bytearray()
        for number, whole, payload in _fields(entry):
            if number == 4:
                kept = b"".join(w for n, w, _ in _fields(payload) if n not in (2, 6))
                times = _encode(2 << 3) + _encode(when) + _encode(6 << 3) + _encode(when)
                whole = _message(4, kept + times)
            out += whole
        update(_message(1, folder.encode()) + _message(2, bytes(out)))


def age(key: str, seconds: float) -> None:
    """Make object `key` of BUCKET `seconds` older than now, by the server's record."""
    _set_times(f"/buckets/{BUCKET}/{key}", int(time.time() - seconds))


def age_upload(upload: str, seconds: float) -> None:
    """Make every part of multipart upload `upload` `seconds` old (the filer's listing)."""
    folder = f"/buckets/{BUCKET}/.uploads/{upload}/"
    host = s3_bucket.FILER_GRPC.rsplit(":", 1)
    url = f"http://{host[0]}:{int(host[1]) - 10000}{folder}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        entries = json.load(answer)["Entries"] or []
    assert entries, f"upload {upload} has no parts"
    for entry in entries:
        _set_times(entry["FullPath"], int(time.time() - seconds))
