"""What reaches what in a store: names, records, and the blobs they refer to.

A name resolves to a blob. A blob reached by a name, or by a digest written as text in a
record, may be a record (`codecs.parse_record`); a record reaches the tensor blobs of its
tree (`{"$tensors": d}`) and of its loose tensors, and every 64-hex string in it (values
and keys, at any depth) that names a blob present. soma's records hold digests as plain
text (an average names `weights`, `state`, `start`, `inputs[*].weights/extra/record`; a
client's record `weights`, `extra`, `own`), and a record of a later version may hold
others: following every such string is conservative, never deleting what a record might
mean (what gc needs). A blob is *needed* when a reader follows a reference to it: a name,
a tensor blob, or a string under one of `DIGEST_KEYS`, from a record that is itself
needed; missing, it is damage (what verify needs). An average's `meeting` is a digest of
the meeting's identity, not a blob; `inputs[*].record` is a note of the client record that
came, which rerunning the client replaces, so a lost one is not damage the store could
ever stop reporting.

A possible record is read whole and hashed while walking (it is small), so a corrupt one
is known before anything it seems to say is followed; a tensor blob is only looked up
(verify hashes it later, streamed, with progress).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from soma.store import Store, codecs, mark_corrupt
from soma.store.errors import BadBlob, CorruptName, SymlinkInStore, UnknownDigest
from soma.store.keeping import BlobFile as BlobFile
from soma.store.keeping import files as files

# A blob reached as a possible record is read whole and hashed while walking when it is at
# most this big, or when it starts like a record.
RECORD_LIMIT = 64 << 20
_RECORD_HEAD = b'{"soma":'
# Keys under which a record's digest is one a reader follows: missing, it is damage.
DIGEST_KEYS = frozenset({"weights", "state", "start", "state_before", "extra", "own"})
_HEX = frozenset("0123456789abcdef")


def is_digest(text: object) -> bool:
    return isinstance(text, str) and len(text) == 64 and set(text) <= _HEX


@dataclass(frozen=True)
class Ref:
    """One way a blob is reached: by a name, or from a record (its digest, and where in it)."""

    name: str | None = None
    record: str | None = None
    at: str = ""
    required: bool = True  # a name, a tensor blob, or a string under DIGEST_KEYS

    def text(self) -> str:
        if self.name is not None:
            return f"name {self.name!r}"
        return f"record {self.record} at {self.at}"


@dataclass
class Look:
    """What one blob turned out to be, read once."""

    present: bool
    size: int = 0
    kind: str = "tensors"  # tensors | record | raw | corrupt
    actual: str | None = None  # its sha256, when it was read whole while walking
    tree: Any = None
    loose: str | None = None


@dataclass
class Graph:
    names: dict[str, str] = field(default_factory=dict)  # name -> digest
    bad_names: list[tuple[str, str]] = field(default_factory=list)  # (name, why)
    parents: dict[str, list[Ref]] = field(default_factory=dict)  # digest -> its refs
    looks: dict[str, Look] = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)  # digest -> tree, sound records
    needed: set[str] = field(default_factory=set)  # see _needed
    missing: set[str] = field(default_factory=set)  # needed, and absent

    def reached(self) -> set[str]:
        """The blobs present that a name reaches."""
        return {d for d, look in self.looks.items() if look.present}

    def corrupt_records(self) -> list[str]:
        """Blobs read as possible records whose bytes are wrong: what they reach is unknown."""
        return [d for d, look in self.looks.items() if look.kind == "corrupt"]


def _key_path(at: str, key: str) -> str:
    return f"{at}[{json.dumps(key, ensure_ascii=False)}]"


def references(tree: object, loose: str | None) -> Iterator[tuple[str, str, bool, bool]]:
    """(digest, where, required, is a tensor blob) for everything a record's tree reaches."""
    if loose is not None:
        yield loose, "tensors", True, True

    def walk(node: object, at: str, key: str | None) -> Iterator[tuple[str, str, bool, bool]]:
        if isinstance(node, str):
            if is_digest(node):
                yield node, at, key in DIGEST_KEYS, False
        elif isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(item, f"{at}[{i}]", None)
        elif isinstance(node, dict):
            if len(node) == 1:
                ((tag, payload),) = node.items()
                if tag == "$tensors" and isinstance(payload, str):
                    yield payload, at, True, True
                    return
                if tag in ("$float", "$tensor"):
                    return
                if tag == "$dict" and isinstance(payload, dict):
                    yield from items(payload, at)
                    return
                if tag in ("$tuple", "$codec"):
                    yield from walk(payload, at, None)
                    return
            yield from items(node, at)

    def items(node: dict, at: str) -> Iterator[tuple[str, str, bool, bool]]:
        for k, v in node.items():
            if is_digest(k):
                yield k, _key_path(at, k), False, False
            yield from walk(v, _key_path(at, k), k)

    yield from walk(tree, "value", None)


def look_at(store: Store, digest: str, as_tensors: bool) -> Look:
    """Read what needs reading of one blob: a tensor blob is only stat-ed here (hashed
    later, with progress); a possible record is read whole and hashed now."""
    try:
        path, f = store.open_blob(digest)
    except (UnknownDigest, SymlinkInStore, BadBlob):  # a link or a FIFO: no blob (`symlinks`)
        return Look(present=False)
    with f:
        size = os.fstat(f.fileno()).st_size
        if as_tensors:
            return Look(present=True, size=size)
        head = f.read(len(_RECORD_HEAD))
        if size > RECORD_LIMIT and head != _RECORD_HEAD:
            return Look(present=True, size=size, kind="raw")
        data = head + f.read()
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            mark_corrupt(f.fileno())
            return Look(present=True, size=size, kind="corrupt", actual=actual)
    if head != _RECORD_HEAD:
        return Look(present=True, size=size, kind="raw", actual=actual)
    try:
        tree, loose = codecs.parse_record(data, str(path))
    except BadBlob:
        return Look(present=True, size=size, kind="raw", actual=actual)
    return Look(True, size, "record", actual, tree, loose)


def walk(store: Store, names: dict[str, str]) -> Graph:
    """Everything `names` reach, breadth first, reading each level's blobs side by side."""
    graph = Graph(names=dict(names))
    frontier: list[tuple[str, Ref, bool]] = [
        (d, Ref(name=n), False) for n, d in sorted(names.items())
    ]
    with ThreadPoolExecutor(8) as pool:
        while frontier:
            pending: dict[str, list[tuple[Ref, bool]]] = {}
            for digest, ref, tensors in frontier:
                if digest in graph.looks:
                    _attach(graph, digest, ref)
                else:
                    pending.setdefault(digest, []).append((ref, tensors))
            wanted = [(d, all(t for _, t in refs)) for d, refs in pending.items()]
            looks = pool.map(lambda item: look_at(store, *item), wanted)
            frontier = []
            for (digest, _), look in zip(wanted, looks, strict=True):
                graph.looks[digest] = look
                for ref, _ in pending[digest]:
                    _attach(graph, digest, ref)
                if look.kind == "record":
                    graph.records[digest] = look.tree
                    for d, at, required, tensors in references(look.tree, look.loose):
                        frontier.append((d, Ref(record=digest, at=at, required=required), tensors))
    graph.needed = _needed(graph)
    graph.missing = {d for d in graph.needed if not graph.looks[d].present}
    return graph


def _attach(graph: Graph, digest: str, ref: Ref) -> None:
    if graph.looks[digest].present or ref.required:
        graph.parents.setdefault(digest, []).append(ref)


def _needed(graph: Graph) -> set[str]:
    """The blobs a reader needs: reached from a name through references a reader follows
    (a name, a tensor blob, a digest under DIGEST_KEYS) from records it needs; a blob
    reached only through a note (`inputs[*].record`, say) is not."""
    roots: list[str] = []
    children: dict[str, list[str]] = {}
    for digest, refs in graph.parents.items():
        for ref in refs:
            if ref.name is not None:
                roots.append(digest)
            elif ref.required and ref.record is not None:
                children.setdefault(ref.record, []).append(digest)
    needed: set[str] = set()
    while roots:
        digest = roots.pop()
        if digest not in needed:
            needed.add(digest)
            roots.extend(children.get(digest, []))
    return needed


def resolve_names(store: Store, names: Iterable[str]) -> tuple[dict[str, str], list]:
    found: dict[str, str] = {}
    bad: list[tuple[str, str]] = []
    for name in names:
        try:
            digest = store.resolve(name)
        except CorruptName as error:
            bad.append((name, str(error)))
            continue
        except SymlinkInStore:  # not a name: `symlinks` reports it
            continue
        if digest is not None:  # unbound since the listing
            found[name] = digest
    return found, bad


def list_blobs(store: Store) -> tuple[dict[str, BlobFile], list[str]]:
    """Every blob file (by digest) and every stray file (a path that is not a blob's), as
    the store lists them (soma.store.keeping: a folder's files, a bucket's keys)."""
    return store.blob_files()


def symlinks(store: Store) -> list[str]:
    """Every symbolic link anywhere under the store, sorted: the store makes none, so each
    is somebody else's (soma.store.keeping; a bucket has none)."""
    return store.symlinks()
