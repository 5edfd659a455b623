"""A content-addressed store on a shared folder: blobs by digest, names that point at them.
(`Store("file:///path")` is the same; `Store("s3://bucket/prefix")`, any other URL, is the
same API on another backend: soma.store.backend.)

    store = Store("/shared/cifar-store")
    store.keep("cifar/round/3/client/0", {"export": trainer.export(), "size": 5000})
    trainer.load(store.recall("cifar/round/3/average")["export"])

Many Slurm jobs on many machines open the same folder (NFS, Lustre, GPFS, or a local
disk); there is no server and no lock. Every file is written once and never changed:
blobs are named by their bytes, and a name is changed only by replacing its file.

Layout (format 1)::

    <dir>/blobs/ab/abcdef...      a blob: its bytes, named by their sha256 (read-only file)
    <dir>/names/cifar/round/3     a name: a file holding one digest and a newline
    <dir>/tmp/<host>.<pid>.<tid>.<random>.<what>
                                  files being written; nothing else writes there
    <dir>/attic/abcdef...         a blob a gc is deleting this instant (see "Health")

Every write goes: a new file in `tmp/`, write, then `link(2)` (a blob, a claim) or
`rename(2)` (a bind) into its final place. A process killed at any instant leaves at worst a
file in `tmp/` (`soma gc` removes those whose writer is gone), never a partial file under a
final name. Against a machine crash (`durability="durable"`, the default), what was written
is made durable in passes (one syncfs, or an fsync of each file and folder): one just before
a name is placed (everything it reaches, and its own temporary), one after it; a group
commit (`Store.group`) binds many names between the same two passes. soma.files lists
what each fsync protects; `durability="scratch"` makes none. A folder on the way to a name
is made the first time it is needed (and made durable by the pass after it).

The hash is sha256 (hashlib, OpenSSL): it is the digest everybody can check with
`sha256sum`, it runs at about the speed of a disk (~1 GB/s a core), and nobody can make two
blobs collide. Every read verifies it: a blob whose bytes no longer hash to its name is
refused with its path and both digests (`CorruptBlob`). The one exception is a small blob
(at most 64 KiB) the same store object wrote in this process lately: its read returns the
bytes that were hashed when it was written, from memory (soma.store.written), so a file
damaged since is refused by every other reader, and by this one once the blob has left
that memory (32 MiB, oldest first), not at once by its writer.

Bytes — `put(data) -> digest`, `get(digest) -> bytes`. Putting what is already there is
one stat and no write (and, at most once a minute, a utime: see "Health").

Names — `bind(name, digest)` points a name at a blob, replacing; `resolve(name)` is its
digest or None (`resolve_many(names)`: each one's, a folder opened once for its names);
`bound(prefix)` lists names, sorted; `claim(name, digest)` takes the name
only if nobody has it. Names are relative text paths (see `soma.store.names` for the rules); a
name is a file, so it cannot also be the folder of other names: with `a/b` bound, `a/b/c`
is refused (`NameConflict`), and the other way round. `bind` and `claim` refuse a digest
the store does not have.

Claiming — `claim` is `link(2)` of a temporary holding the digest onto the name: link fails
when the name exists, which is the whole point (`rename` would replace it, and
resolve-then-bind is a race). Following open(2)'s recipe for NFS, where a retransmitted
LINK can report failure for a link that happened, any error from link is answered by
stat-ing the temporary: a link count of 2 means the claim was ours. The temporary is
removed, win or lose.

Values — `keep(name, value) -> digest` and `recall(name)`, through `soma.store.codecs`: tensors
as safetensors (a tensor-shaped dict, such as one node of an export, is its own blob, so an
unchanged node is written once, ever), structure as canonical JSON; never pickle, so
reading never runs code. `put_value`/`recall_digest` do the same by digest without a name, and
`put_tensors`/`get_tensors` read and write one safetensors blob.

Large values: keeping streams each tensor's own memory to the file while hashing it (no
copy of the value is built). A blob is hashed first and written only if it is new, so an
unchanged node costs one hash and not a byte written — on a network folder, not a byte on
the wire. Nothing is known until the last byte is hashed, so keeping a new blob costs a
hash *then* a write; but with a second CPU the next node's blob is hashed (in a thread)
while this one's is written, so an export of several nodes overlaps the two. A new blob's
writeback to the disk is started every few MB as it is written (sync_file_range(2), Linux)
rather than all left to the closing pass. A tensor blob of 4 MB or more that is likely new
is written to its temporary while it is hashed, on a local filesystem in a process with a
second CPU (its affinity: a one-CPU Slurm task never does): likely new unless a sample of
its bytes (its header, 256 bytes spread over each tensor) was kept by this process lately,
which an unchanged node's is and a trained one's is not. A prediction only: if the blob
turns out to be there already, the temporary is truncated and removed before it is ever
flushed (no disk write, but a page-cache copy spent, which cost a 1 GB blob already there
~3x its hash-only time when every blob was written beside). `write_beside_hash=True`
writes every large blob beside its hash, `False` none. It never applies on a network
folder, where dirty pages may reach the server before the truncate.

Reading verifies at sha256's speed (~1 GB/s a core), the tensor blobs of one value side
by side on up to 4 CPUs. `recall(name, lazy=True)` maps the blobs (copy-on-write mmap)
after verifying them, so the tensors are file-backed pages the kernel can drop, not
anonymous memory, and are writable without touching the file; `recall_each(names)` yields
values one at a time (lazily by default), so
`fedavg((r["export"], r["size"]) for r in store.recall_each(names))` holds one model and an
accumulator, not N models. Lazy tensors are views of the blob files: the files must stay
while the tensors are alive (the store deletes only what `soma gc` finds no name reaching;
on a local filesystem an unlinked file stays readable while it is mapped).

What a network folder costs, in metadata round trips (NFS calls) per operation:

- `resolve`: one open (LOOKUP + GETATTR for close-to-open) and a small READ; no blob read.
- `bound(prefix)`: one READDIR(PLUS) per folder under the prefix; no file is opened.
- `put` of a blob already there: one stat (and a SETATTR, the utime, when it was last
  touched more than a minute ago). A new blob:
  CREATE, WRITEs, LINK, REMOVE (its COMMIT is the next pass's); plus one MKDIR the first
  time one of the 256 fan-out folders is used. `keep` is a put per tensor blob, one for the
  record, and a `bind`.
- `bind`: stat of the blob, CREATE+WRITE of the temporary, a pass (COMMITs), RENAME, a pass.
- `claim`: the same with LINK instead of RENAME, a GETATTR only if LINK reports an error,
  and the REMOVE of the temporary.
- `get`/`recall`: OPEN, READs of the whole blob (verified), CLOSE; none for a small blob
  this store wrote lately (soma.store.written). Inside `reading()` a
  thread opens each of the 256 fan-out folders once for all the blobs it reads there
  (soma.store.held: a round's checks); `resolve_many` opens each folder of names once.

What it needs from the folder: link(2) and rename(2) atomic (NFSv3/v4, Lustre, GPFS are);
close-to-open consistency, so a name written and closed on one machine reads right after
an open on another (the NFS default; never mount with `nocto`). Caching: blobs never
change, so caching them is always right; names do, and a client caches lookups and folder
contents for up to `acdirmax` (60 s by default), so a machine polling `resolve`/`bound` for
names made elsewhere should mount with `lookupcache=positive` (a name that appears is seen
at the next poll) and a short `acdirmin`/`acdirmax` (e.g. `actimeo=1`); `noac` works but
makes every write synchronous. A lazy recall over NFS maps the file: if a blob were deleted
on the server while mapped, touching an evicted page would be SIGBUS (see soma.health for
what gc deletes, and when).

Health (soma.health has verify, repair and gc; these are the store's parts of it):

- A blob already there is not trusted blindly by a put: its size is compared with the bytes
  about to be written (the stat is done anyway), and it is hashed when the size is wrong,
  when it is marked corrupt, or when the store was made with `verify_existing=True`. A
  wrong one is replaced atomically (a temporary renamed over it: the new bytes are by
  definition the right ones), so rerunning the job that wrote a value repairs its blobs.
- A read that finds a blob corrupt marks it (its mtime set to the epoch, on the inode read)
  before raising `CorruptBlob`, so that the next put of those bytes replaces it, however
  cheap its check. Only the file's owner (or root) can set the mark.
- A put of a blob already there refreshes its mtime (os.utime, when older than
  `REFRESH_AFTER`): a put is a use, and gc deletes only unreachable blobs untouched for its
  grace period. A gc moves a blob to `attic/` before deciding, and every read or put that
  misses a blob links it back from there first; see soma.health for why that is sound.
- Symbolic links: the store makes none and follows none, against a careless user or
  anyone else who can write the shared folder. Its folders (`blobs`, `names`, `tmp`,
  `attic`) are refused as links when a store is opened (`BadStore`); a blob, a name file,
  and every folder on the way to one below them are opened one by one with O_NOFOLLOW (an
  openat per folder: no extra round trip where the lookups are cached), so a read or a
  listing refuses a link naming it (`SymlinkInStore`) and never reads, marks or lists
  through one; a put finds a link where its blob goes by lstat and renames the right
  bytes over it. `soma verify` reports every link, and `soma gc` refuses to run while one
  is there (soma.health).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

# Every name importable from soma.store before it was split into modules still is: those
# of `__all__`, and (as `x as x`, an explicit re-export) the others, from where they live.
# Those of the modules that import torch (the tensor codecs, the folder store) are imported
# on first use (`_LAZY`, PEP 562), so that checking a path or a name, or serving a bucket,
# does not import torch: the `soma` command line's start (see soma/cli/__init__.py).
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
from soma.store.names import MAX_STORE_PATH_BYTES as MAX_STORE_PATH_BYTES
from soma.store.names import check_name as check_name
from soma.store.names import split_prefix as split_prefix
from soma.store.safe_open import check_folder
from soma.store.safe_open import symlink_refused as symlink_refused

# name -> the module it is imported from on first use (a submodule, `codecs`, is its own)
_LAZY = {
    "Store": "soma.store.opening",
    "FolderStore": "soma.store.folder",
    "register_codec": "soma.store.codecs",
    "unregister_codec": "soma.store.codecs",
    "CORRUPT_MARK_NS": "soma.store.pipeline",
    "REFRESH_AFTER": "soma.store.pipeline",
    "check_digest": "soma.store.pipeline",
    "hash_file": "soma.store.pipeline",
    "hash_stream": "soma.store.pipeline",
    "mark_corrupt": "soma.store.pipeline",
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


def __getattr__(name: str) -> Any:
    """A name of `_LAZY`, or a submodule (`soma.store.codecs`), imported on first use: the
    lazy boundary that keeps torch out of `import soma.store`."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name.startswith("_"):  # `__wrapped__` and the like, looked for by tools: no module
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from soma.store import codecs as codecs
    from soma.store import tensorfile as tensorfile
    from soma.store.codecs import register_codec, unregister_codec
    from soma.store.folder import FolderStore as FolderStore
    from soma.store.opening import Store
    from soma.store.pipeline import CORRUPT_MARK_NS as CORRUPT_MARK_NS
    from soma.store.pipeline import REFRESH_AFTER as REFRESH_AFTER
    from soma.store.pipeline import check_digest
    from soma.store.pipeline import hash_file as hash_file
    from soma.store.pipeline import hash_stream as hash_stream
    from soma.store.pipeline import mark_corrupt as mark_corrupt
    from soma.store.values import Values as Values
