"""The store backends every contract test runs against, one fixture parameter each.

A new backend joins the contract by adding one entry to `KINDS` (how to make an empty store
of it, and how a test reaches a blob's stored bytes behind the store's back) and, if it needs a
server, a marker; every test in tests/contract/ then runs against it too.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from soma.store import Store


@dataclass(frozen=True)
class Kind:
    """One backend, as the contract tests see it."""

    name: str
    make: Callable[[], Store]  # an empty store of this kind, in a place of its own
    read_raw: Callable[[Store, str], bytes]  # a blob's bytes as stored, unverified
    write_raw: Callable[[Store, str, bytes], None]  # replace them, behind the store's back
    digests: Callable[[Store], list[str]]  # every blob the store holds


def _folder(tmp_path: Path) -> Kind:
    places = itertools.count()

    def write_raw(store: Store, digest: str, data: bytes) -> None:
        path = store.blob_path(digest)
        path.chmod(0o644)
        path.write_bytes(data)

    return Kind(
        name="folder",
        make=lambda: Store(tmp_path / f"store{next(places)}"),
        read_raw=lambda store, digest: store.blob_path(digest).read_bytes(),
        write_raw=write_raw,
        digests=lambda store: sorted(p.name for p in (store.directory / "blobs").glob("*/*")),
    )


_PREFIXES = itertools.count()  # one bucket for the session: each store under a prefix of its own


def _s3() -> Kind:
    from s3_bucket import BUCKET

    def key(store: Store, digest: str) -> str:
        return f"{store.backend.prefix}blobs/{digest[:2]}/{digest}"

    def read_raw(store: Store, digest: str) -> bytes:
        answer = store.backend.client.get_object(Bucket=BUCKET, Key=key(store, digest))
        return answer["Body"].read()

    def write_raw(store: Store, digest: str, data: bytes) -> None:
        store.backend.client.put_object(Bucket=BUCKET, Key=key(store, digest), Body=data)

    return Kind(
        name="s3",
        make=lambda: Store(f"s3://{BUCKET}/contract{next(_PREFIXES)}"),
        read_raw=read_raw,
        write_raw=write_raw,
        digests=lambda store: sorted(k[3:] for k, _, _ in store.backend.blobs()),
    )


KINDS = {
    "folder": lambda request, tmp_path: _folder(tmp_path),
    "s3": lambda request, tmp_path: request.getfixturevalue("bucket") and _s3(),
}
MARKS = {"s3": [pytest.mark.s3]}


@pytest.fixture(params=[pytest.param(name, marks=MARKS.get(name, [])) for name in KINDS])
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Kind:
    return KINDS[request.param](request, tmp_path)


@pytest.fixture
def store(kind: Kind) -> Store:
    return kind.make()
