"""A content-addressed store on a shared folder: blobs by digest, names that point at them.

Its design (layout, claims, durability, what a network folder needs, the guarantees and
against whom they hold) is docs/explanation/store.md ("The store: blobs, names, claims").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from soma import files as files
from soma.files import DURABILITIES as DURABILITIES
from soma.files import DURABLE as DURABLE
from soma.files import SCRATCH as SCRATCH
from soma.files import SHARED_MARKER as SHARED_MARKER
from soma.files import can_syncfs as can_syncfs
from soma.files import create_new as create_new
from soma.files import fsync_folder as fsync_folder
from soma.files import make_durable as make_durable
from soma.files import write_all as write_all
from soma.files import write_atomic as write_atomic
from soma.lazy import lazy

# Every name importable from soma.store before it was split into modules still is: those
# of `__all__`, and (as `x as x`, an explicit re-export) the others, from where they live.
# The store type and the modules behind it are imported on first use (`_LAZY`, PEP 562), so
# that checking a path or a name, or serving a bucket, imports no store; and torch only when
# a tensor is encoded or decoded (soma.lazy.OnUse in the modules that meet tensors), so that
# opening a store and reading records and names does not: the `soma` command line's start.
from soma.store import errors as errors
from soma.store import names as names
from soma.store.errors import (
    BadBlob,
    BadDigest,
    BadName,
    BadStore,
    CorruptBlob,
    CorruptName,
    NameConflict,
    NoCodec,
    NotText,
    StoreError,
    StoreUnavailable,
    SymlinkInStore,
    UnknownDigest,
    UnknownName,
    UnwritableStore,
)
from soma.store.folder.safe_open import check_folder
from soma.store.folder.safe_open import symlink_refused as symlink_refused
from soma.store.names import MAX_STORE_PATH_BYTES as MAX_STORE_PATH_BYTES
from soma.store.names import check_name as check_name
from soma.store.names import split_prefix as split_prefix

# name -> the module it is imported from on first use (a submodule, `codecs`, is its own)
_LAZY = {
    "Store": "soma.store.opening",
    "FolderStore": "soma.store.folder.store",
    "register_codec": "soma.store.codecs",
    "unregister_codec": "soma.store.codecs",
    "CORRUPT_MARK_NS": "soma.store.keeping",
    "REFRESH_AFTER": "soma.store.keeping",
    "check_digest": "soma.store.hashing",
    "hash_file": "soma.store.hashing",
    "hash_stream": "soma.store.hashing",
    "mark_corrupt": "soma.store.keeping",
    "Values": "soma.store.values",
}

__all__ = [
    "Store",
    "check_digest",
    "check_folder",
    "register_codec",
    "unregister_codec",
    "StoreError",
    "StoreUnavailable",
    "BadStore",
    "BadName",
    "NameConflict",
    "BadDigest",
    "UnknownDigest",
    "UnknownName",
    "CorruptBlob",
    "CorruptName",
    "BadBlob",
    "NoCodec",
    "NotText",
    "SymlinkInStore",
    "UnwritableStore",
]


__getattr__, __dir__ = lazy(__name__, _LAZY, globals())


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from soma.store import codecs as codecs
    from soma.store import tensorfile as tensorfile
    from soma.store.codecs import register_codec, unregister_codec
    from soma.store.folder.store import FolderStore as FolderStore
    from soma.store.hashing import check_digest
    from soma.store.hashing import hash_file as hash_file
    from soma.store.hashing import hash_stream as hash_stream
    from soma.store.keeping import CORRUPT_MARK_NS as CORRUPT_MARK_NS
    from soma.store.keeping import REFRESH_AFTER as REFRESH_AFTER
    from soma.store.keeping import mark_corrupt as mark_corrupt
    from soma.store.opening import Store
    from soma.store.values import Values as Values
