"""What `soma.Store` refuses, as one hierarchy: catch `StoreError` for all of it (and
`soma.SomaError` for all of it and every other refusal soma makes).

Each refusal also subclasses the builtin a caller would naturally catch
(`ValueError` for a bad argument, `LookupError` for something absent, `TypeError`
for a value of a type the store cannot keep), so code that predates the store's
own classes keeps working.
"""

from __future__ import annotations

from soma.errors import SomaError


class StoreError(SomaError):
    """Anything the store refuses."""


class BadStore(StoreError, ValueError):
    """A folder that cannot hold a store: a file is in the way, or its path leaves no room for
    the names under it; the message names the path."""


class BadName(StoreError, ValueError):
    """A name (or a prefix) that is not a valid store name; the message says which rule."""


class NameConflict(StoreError, ValueError):
    """A name that is also the folder of other names (`a/b` and `a/b/c`), which cannot both be."""


class BadDigest(StoreError, ValueError):
    """A string that is not a digest at all (64 lowercase hex characters)."""


class UnknownDigest(StoreError, LookupError):
    """A well-formed digest with no blob in this store."""


class UnknownName(StoreError, LookupError):
    """`recall` of a name nobody bound."""


class CorruptBlob(StoreError):
    """A blob whose bytes no longer hash to its digest: `path`, `expected`, `actual`."""

    def __init__(self, path: str, expected: str, actual: str) -> None:
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(
            f"blob {path} is corrupt: its name says sha256 {expected} but its bytes hash to "
            f"{actual}; it was changed after it was written (delete it and keep the value again)"
        )


class BadBlob(StoreError, ValueError):
    """A blob that verifies but is not what it is read as (a lying safetensors header,
    a record that is not one); the message names the blob."""


class CorruptName(StoreError):
    """A name file whose content is not a digest (written by something other than the store)."""


class NoCodec(StoreError, TypeError):
    """Part of a value the store cannot keep; the message names its type and where it sits."""


class NotText(StoreError, TypeError):
    """A map key that is not text; the message names the key and where its map sits."""
