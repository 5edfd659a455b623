"""A record blob's JSON, apart from its tensors (soma.store.codecs): written canonically,
parsed with its size capped, its tensor-map references listed. Pure Python, no torch: a
reader of records alone (a signature's check, `soma keys`, `soma status`) needs no more.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from soma.store.errors import BadBlob, NoCodec

RECORD_VERSION = 1
# A record blob's largest size, refused when written and before it is parsed when read (a
# backend stops reading there, soma.store.backend). Records are a few hundred bytes (an
# export of 10^4 nodes, a digest each, is ~1 MB); bulk data is kept as tensors. The same
# 64 MB as soma.health's RECORD_LIMIT, past which health reads a blob as a record no more.
MAX_RECORD = 64 << 20


def canonical_json(obj: object) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def record_bytes(tree: object, loose_digest: str | None) -> bytes:
    """The record blob of `tree`; `NoCodec` past MAX_RECORD, which no reader would read."""
    record: dict[str, object] = {"soma": RECORD_VERSION, "value": tree}
    if loose_digest is not None:
        record["tensors"] = loose_digest
    data = canonical_json(record)
    if len(data) > MAX_RECORD:
        raise NoCodec(
            f"value is {len(data)} bytes as JSON, more than the {MAX_RECORD} a record may be; "
            "keep bulk data as tensors"
        )
    return data


def parse_record(data: bytes, where: str) -> tuple[object, str | None]:
    """The tree and loose-tensor digest of a record blob, or `BadBlob` naming it."""
    if len(data) > MAX_RECORD:
        raise BadBlob(
            f"blob {where} is not a soma record: it is {len(data)} bytes, more than the "
            f"{MAX_RECORD} a record may be"
        )
    try:
        record = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise BadBlob(
            f"blob {where} is not a soma record: it is nested deeper than this interpreter "
            "can parse"
        ) from None
    except (ValueError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict) or record.get("soma") != RECORD_VERSION:
        raise BadBlob(f"blob {where} is not a value kept by Store.keep (not a soma record)")
    if "value" not in record or not set(record) <= {"soma", "value", "tensors"}:
        raise BadBlob(f"blob {where} is not a soma record: it has keys {sorted(record)}")
    loose = record.get("tensors")
    if loose is not None and not isinstance(loose, str):
        raise BadBlob(f"blob {where}: its 'tensors' is not a digest")
    return record["value"], loose


def _tag(node: dict) -> tuple[str, object] | None:
    if len(node) == 1:
        ((key, payload),) = node.items()
        if key.startswith("$"):
            return key, payload
    return None


def references(tree: object) -> Iterator[str]:
    """The digests of the tensor-map blobs a tree refers to, in the order decode meets them
    (found at once: a record is read ~2 times a contribution, and nested generators cost a
    frame for every value, a scalar as much as a map)."""
    found: list[str] = []
    _references(tree, found)
    return iter(found)


def _references(tree: object, found: list[str]) -> None:
    if isinstance(tree, list):
        items: Iterable[object] = tree
    elif isinstance(tree, dict):
        tag = _tag(tree)
        if tag is None:
            items = tree.values()
        elif tag[0] == "$tensors" and isinstance(tag[1], str):
            found.append(tag[1])
            return
        elif tag[0] in ("$dict", "$tuple", "$codec"):
            items = (tag[1],)
        else:
            return
    else:
        return
    for item in items:
        if isinstance(item, (list, dict)):
            _references(item, found)
