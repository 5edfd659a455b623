"""Values on any store: `keep`/`recall` of values whose tensors are safetensors blobs.

Why a module of its own: the folder store and every backend's store (soma.store.backend)
share it: it needs only a store's put/get, `_put_plans`, `_read_many`, `get_tensors` and its
names, and turns values into blobs through soma.store.codecs (tensors as safetensors,
structure as canonical JSON; never pickle).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from soma.lazy import OnUse
from soma.store import codecs, record_json
from soma.store.errors import BadBlob, BadDigest, UnknownName
from soma.store.hashing import check_digest, hash_plan
from soma.store.names import check_name

if TYPE_CHECKING:
    import torch

    from soma.store import tensorfile
else:  # torch only where a value holds a tensor (soma.lazy.OnUse)
    tensorfile = OnUse("soma.store.tensorfile", globals())


class Values:
    """Values on any store (the folder's or a backend's): keep/recall through soma.store.codecs,
    on the store's put/get, `_put_plans`, `_read_many` and `get_tensors`."""

    def keep(self, name: str, value: object) -> str:
        """Keep `value` (see soma.store.codecs) and bind `name` to it; the record's digest."""
        check_name(name)
        digest = self.put_value(value)
        self.bind(name, digest)
        return digest

    def recall(self, name: str, *, lazy: bool = False) -> object:
        """The value `name` was kept with. `lazy`: tensors map the verified blob files."""
        digest = self.resolve(name)
        if digest is None:
            raise UnknownName(f"no name {name!r} in {self}")
        return self.recall_digest(digest, lazy=lazy)

    def recall_each(self, names: Iterable[str], *, lazy: bool = True) -> Iterator[object]:
        """The values of `names`, one at a time, each recalled only when asked for.

        Lazy by default: with the previous value dropped, a loop over N exports holds the
        one being used (as file-backed pages), never N.
        """
        for name in names:
            yield self.recall(name, lazy=lazy)

    def recall_each_digest(self, digests: Iterable[str], *, lazy: bool = True) -> Iterator[object]:
        """`recall_each` by record digest instead of by name."""
        for digest in digests:
            yield self.recall_digest(digest, lazy=lazy)

    def put_value(self, value: object) -> str:
        """Keep `value` without a name; the digest of its record."""
        return self.put(record_of(value, self._put_plans))

    def recall_digest(self, digest: str, *, lazy: bool = False) -> object:
        """The value whose record is blob `digest`."""
        where = self._where(digest)
        tree, loose_digest = codecs.parse_record(
            self._get_at_most(digest, record_json.MAX_RECORD), where
        )
        try:
            wanted = list(dict.fromkeys(codecs.references(tree)))
        except RecursionError:
            raise BadBlob(f"blob {where} is nested deeper than this interpreter can walk") from None
        for d in wanted + ([loose_digest] if loose_digest else []):
            try:
                check_digest(d)
            except BadDigest:
                raise BadBlob(f"blob {where} refers to {d!r}, which is not a digest") from None
        first = dict(zip(wanted, self._read_many(wanted, lazy), strict=True))
        loose: list[dict[str, torch.Tensor]] = []

        def tensors(d: str) -> dict[str, torch.Tensor]:
            # a blob met twice (two equal nodes) is read twice: two values, not one aliased
            return first.pop(d) if d in first else self.get_tensors(d, lazy=lazy)

        def loose_tensors() -> dict[str, torch.Tensor]:
            if not loose:
                if loose_digest is None:
                    raise BadBlob(f"blob {where} has loose tensors but no 'tensors' blob")
                loose.append(self.get_tensors(loose_digest, lazy=lazy))
            return loose[0]

        return codecs.decode(tree, where, tensors, loose_tensors)

    def _where(self, digest: str) -> str:
        """Where blob `digest` is, as text, for messages (the folder store's spares a Path)."""
        return str(self.blob_path(digest))

    def get_record(self, digest: str) -> bytes:
        """The bytes of record blob `digest` (a signed record, a charter, a round's record),
        verified, and refused (`BadBlob`) past a record's cap before more is read: a blob
        planted under a record's digest costs a reader at most the cap, never its size."""
        return self._get_at_most(digest, record_json.MAX_RECORD)

    def _get_at_most(self, digest: str, limit: int) -> bytes:
        """The bytes of blob `digest`, verified, refused past `limit` (a record's cap).

        Here read whole and then measured (a folder's file is what it is); a backend's store
        stops reading at the limit instead (soma.store.backend)."""
        data = self.get(digest)
        if len(data) > limit:
            where = self.blob_path(digest)
            raise BadBlob(f"blob {where} is {len(data)} bytes, more than the {limit} allowed here")
        return data

    def put_tensors(self, tensors: dict[str, torch.Tensor]) -> str:
        """Keep one map of text to tensors as one safetensors blob; its digest."""
        return self._put_plan(tensorfile.plan(codecs.check_tensor_map(tensors, "tensors")))


def record_of(
    value: object, digests_of: Callable[[list[tensorfile.TensorPlan]], list[str]]
) -> bytes:
    """The record blob of `value`, its tensor blobs named by `digests_of(plans)` (which
    writes them, or only hashes them): all of it checked before `digests_of` is called."""
    encoded = codecs.encode(value)
    plans = [tensorfile.plan(tensors) for _, tensors in encoded.maps]
    if encoded.loose:
        plans.append(tensorfile.plan(encoded.loose_map()))
    digests = digests_of(plans)
    for (ref, _), digest in zip(encoded.maps, digests, strict=False):
        ref["$tensors"] = digest
    loose = digests[-1] if encoded.loose else None
    return codecs.record_bytes(encoded.tree, loose)


def value_digest(value: object) -> str:
    """The digest `put_value(value)` would return, computed without writing a byte: so that
    a caller can learn that a value would be refused (a rerun bringing other weights to a
    claimed record) before anything of it reaches the store."""
    hashed = record_of(value, lambda plans: [hash_plan(plan) for plan in plans])
    return hashlib.sha256(hashed).hexdigest()
