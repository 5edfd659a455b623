"""What `soma.Store` refuses, as one hierarchy: catch `StoreError` for all of it (and
`soma.SomaError` for all of it and every other refusal soma makes).

Each refusal also subclasses the builtin a caller would naturally catch
(`ValueError` for a bad argument, `LookupError` for something absent, `TypeError`
for a value of a type the store cannot keep), so code that predates the store's
own classes keeps working.
"""

from __future__ import annotations

import os

from soma.errors import SomaError


class StoreError(SomaError):
    """Anything the store refuses."""


class BadStore(StoreError, ValueError):
    """A folder that cannot hold a store: a file is in the way, or its path leaves no room for
    the names under it; the message names the path."""


class SymlinkInStore(StoreError):
    """A symbolic link where the store keeps its own files (a blob, a name, a folder of
    them): the store makes none, so it is somebody else's, and it is never followed (a read
    through it could mark, or a gc delete, a file outside the store); the message names it."""


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
    """A blob whose bytes no longer hash to its digest: `path`, `expected`, `actual`.

    The advice is only what works: deleting the blob would not (a published average is
    never recomputed by rerunning its round, which finds it published); `soma repair`
    rebuilds an average's blobs from its inputs, and names the job whose rerun writes any
    other blob again (a put of those bytes replaces the blob, which the read marked).
    """

    def __init__(self, path: str, expected: str, actual: str) -> None:
        self.path, self.expected, self.actual = path, expected, actual
        store = os.path.dirname(os.path.dirname(os.path.dirname(path))) or "."
        super().__init__(
            f"blob {path} is corrupt: its name says sha256 {expected} but its bytes hash to "
            f"{actual}; it was changed after it was written. Run `soma repair --store {store}`: "
            "it rebuilds an average's blobs from the average's inputs, and otherwise says which "
            "job to rerun (rerunning what wrote a blob replaces it)"
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


class StoreUnavailable(StoreError, OSError):
    """A request the store retried for its whole patience (soma.store.patience) still failed:
    the store is unreachable, full or failing, which is not a client's failure (a client that
    meets it fails; it never drops out). The message names the store, the request and the
    last error."""


class UnwritableStore(StoreError, OSError):
    """A store this process may not make or write: its file system is read-only, or it lacks
    the permission (EROFS, EACCES, EPERM), found when the store is opened or at a later
    write. Not retried (nobody fixes it from a client) and not a `BadStore` (the path is a
    fine place for a store): the message names the store, the path refused and the way out.
    An `OSError` still, as what it replaces was."""


class OversizedBlob(CorruptBlob, BadBlob):
    """More bytes arrived for a blob than it can have (the size this process wrote it with,
    what its own safetensors header declares, or a record's cap), so the read stopped there,
    before the rest could be hashed: the bytes are not the blob's (`CorruptBlob`) or the blob
    is not what it is read as (`BadBlob`), and which one is not known. The message names the
    blob and the bound (`limit`)."""

    def __init__(self, path: str, expected: str, limit: int, why: str) -> None:
        self.path, self.expected, self.actual, self.limit = path, expected, "", limit
        StoreError.__init__(
            self,
            f"blob {path} (sha256 {expected}): more than {limit} bytes arrived, but {why}; "
            "refused without reading on: its bytes are not the blob's (run `soma verify`, "
            "which says so) or it is not what it was read as",
        )
