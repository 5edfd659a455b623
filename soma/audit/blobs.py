"""Every byte a value is made of, read back and hashed against its digest.

A value in the store is a record blob and the tensor blobs its tree names; a lazily mapped
tensor blob is not hashed when it is read, so the audit reads each one whole through
`Store.get`, which verifies it. Kept apart so that what "a contribution's blob is sound"
means is one function.
"""

from __future__ import annotations

from soma.store import Store, codecs


def value_blobs(store: Store, digest: str) -> list[str]:
    """The blobs value `digest` is made of (its record, then its tensor blobs), each read
    and hashed: a blob whose bytes do not hash to its digest, or that is missing, raises
    the store's own refusal (CorruptBlob, UnknownDigest, BadBlob) naming it."""
    tree, loose = codecs.parse_record(store.get_record(digest), digest)
    found = [digest, *codecs.references(tree), *([] if loose is None else [loose])]
    for blob in found[1:]:
        store.get(blob)
    return found
