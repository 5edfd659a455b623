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
commit (`Store.group`) binds many names between the same two passes. soma.store.files lists
what each fsync protects; `durability="scratch"` makes none. A folder on the way to a name
is made the first time it is needed (and made durable by the pass after it).

The hash is sha256 (hashlib, OpenSSL): it is the digest everybody can check with
`sha256sum`, it runs at about the speed of a disk (~1 GB/s a core), and nobody can make two
blobs collide. Every read verifies it: a blob whose bytes no longer hash to its name is
refused with its path and both digests (`CorruptBlob`).

Bytes — `put(data) -> digest`, `get(digest) -> bytes`. Putting what is already there is
one stat and no write (and, at most once a minute, a utime: see "Health").

Names — `bind(name, digest)` points a name at a blob, replacing; `resolve(name)` is its
digest or None; `bound(prefix)` lists names, sorted; `claim(name, digest)` takes the name
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
- `get`/`recall`: OPEN, READs of the whole blob (verified), CLOSE.

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

import ctypes
import errno
import hashlib
import mmap
import os
import queue
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

import torch

from soma.store import codecs, tensorfile
from soma.store.codecs import register_codec, unregister_codec
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
    SymlinkInStore,
    UnknownDigest,
    UnknownName,
)
from soma.store.files import (
    DURABILITIES,
    DURABLE,
    SCRATCH,
    SHARED_MARKER,
    can_syncfs,
    create_new,
    fsync_folder,
    make_durable,
    write_all,
    write_atomic,
)
from soma.store.names import MAX_STORE_PATH_BYTES, check_name, split_prefix

__all__ = [
    "Store",
    "check_digest",
    "check_folder",
    "register_codec",
    "unregister_codec",
    "StoreError",
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
]

_HEX = frozenset("0123456789abcdef")
# With write_beside_hash, a tensor blob at least this large is written while it is hashed.
_SPECULATE_FROM = 4 << 20


# Filesystems where a temporary that is truncated and removed before it is flushed never
# costs a disk write; on anything else (NFS, Lustre, GPFS, CIFS, FUSE...) dirty pages may
# reach the server early, so write_beside_hash does not apply there.
_LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "ramfs", "overlay"}
)


def _filesystem(path: Path) -> str:
    """The type of the filesystem `path` is on (Linux /proc/self/mountinfo; '' if unknown)."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError:  # pragma: no cover - not Linux
        return ""
    target, best, kind = os.path.realpath(path), -1, ""
    for fields in mounts:
        point = fields[4].encode().decode("unicode_escape")  # \040 is a space in mountinfo
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best and "-" in fields:
            best, kind = len(point), fields[fields.index("-") + 1]
    return kind


def _cpus() -> int:
    """The CPUs this process may run on (a Slurm task's cgroup/affinity, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def check_folder(directory: str | os.PathLike[str]) -> Path:
    """The absolute path of `directory` if a store can be there, made or not; else `BadStore`.

    Refused before anything is made: a path longer than `MAX_STORE_PATH_BYTES` (with a name
    of up to `MAX_NAME_BYTES` under it, a file's path would pass PATH_MAX), and anything but
    a folder where the store or one of its folders must be (a mistyped `--store` naming a
    file would otherwise fail half way with a bare OSError).
    """
    text = os.fspath(directory)
    if isinstance(text, str) and text.lower().startswith("file://"):  # file:///abs/path
        text = unquote(urlsplit(text).path)
    path = Path(os.path.abspath(text))
    size = len(os.fsencode(path))
    if size > MAX_STORE_PATH_BYTES:
        raise BadStore(
            f"store folder {str(path)[:60]!r}... is {size} bytes long; a store's path is at "
            f"most {MAX_STORE_PATH_BYTES}, so that the names under it stay under PATH_MAX"
        )
    culprit = _in_the_way(path)
    if culprit is not None:
        what = (
            "a symbolic link, which the store never follows (put the folder itself there)"
            if culprit.is_symlink()
            else "a file"
            if culprit.is_file()
            else "something other than a folder"
        )
        if culprit == path:
            raise BadStore(f"store folder {path} is {what}, not a folder")
        raise BadStore(f"store folder {path} cannot be a store: {culprit} is {what}")
    return path


def _in_the_way(path: Path) -> Path | None:
    """The first thing that is there and is not a folder, where the store needs one: its own
    folders (a symbolic link is not one), itself, or the nearest one above it that is there."""
    for folder in (path / "blobs", path / "names", path / "tmp", path / "attic"):
        if folder.is_symlink() or (_there(folder) and not folder.is_dir()):
            return folder
    for folder in (path, *path.parents):
        if folder.is_dir():
            return None
        if _there(folder):
            return folder
    return None


def _there(path: Path) -> bool:
    return path.exists() or path.is_symlink()  # a dangling link is in the way too


# The store never follows a symbolic link it did not make (it makes none): a blob, a name
# file and a folder of names are opened with O_NOFOLLOW, folder by folder from one the store
# opened itself, so a link planted anywhere on the way is refused (`SymlinkInStore`), never
# read through, marked through, or listed through. A file is opened O_NONBLOCK: a FIFO
# planted where a file was is refused by what it is, not waited on.
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_FOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _a_link(error: OSError, name: str | os.PathLike[str], dir_fd: int | None) -> bool:
    """Whether a no-follow open of `name` in `dir_fd` failed because it is a symbolic link
    (ELOOP for a file; ENOTDIR for a folder, which a link to one is not)."""
    if error.errno == errno.ELOOP:
        return True
    if error.errno != errno.ENOTDIR:
        return False
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def symlink_refused(path: str | os.PathLike[str], what: str) -> SymlinkInStore:
    """The refusal of the symbolic link at `path` (a `what`: blob, name file, folder...)."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return SymlinkInStore(
        f"{what} {path} is a symbolic link{target}: the store makes none and follows none; "
        "remove the link (what it points at is not touched), or put the real file or folder "
        "in its place (`soma verify` lists every link in the store)"
    )


def _open_in(folder: Path, segments: Iterable[str], what: str) -> int:
    """`folder` (the store's own, checked when the store was opened) and then each of
    `segments` below it opened as a folder, none followed if it is a link: its fd (the
    caller closes it). FileNotFoundError or NotADirectoryError when one is not a folder."""
    try:
        fd = os.open(folder, _FOLDER)
    except OSError as error:  # made a link after the store was opened
        if _a_link(error, folder, None):
            raise symlink_refused(folder, "store folder") from None
        raise
    for i, segment in enumerate(segments):
        try:
            inner = os.open(segment, _FOLDER, dir_fd=fd)
        except OSError as error:
            link = _a_link(error, segment, fd)
            os.close(fd)
            if link:
                raise symlink_refused(folder.joinpath(*list(segments)[: i + 1]), what) from None
            raise
        os.close(fd)
        fd = inner
    return fd


def _is_folder(name: str, dir_fd: int) -> bool:
    """Whether `name` in `dir_fd` is a folder (never following a link)."""
    try:
        return stat.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _open_file(folder: Path, segments: list[str], what: str) -> BinaryIO:
    """The file `folder/segments...` opened for reading (unbuffered), no part of the way
    below `folder` followed if it is a link (`SymlinkInStore`, naming it)."""
    fd = _open_in(folder, segments[:-1], f"folder of {what}s")
    try:
        return open(
            segments[-1],
            "rb",
            buffering=0,
            opener=lambda name, flags: os.open(name, flags | _NO_FOLLOW, dir_fd=fd),
        )
    except OSError as error:
        if _a_link(error, segments[-1], fd):
            raise symlink_refused(folder.joinpath(*segments), what) from None
        raise
    finally:
        os.close(fd)


# Putting a blob that is already there refreshes its mtime (gc's grace, soma.health) when it
# is older than this: a blob re-put every round costs a stat, and a utime once a minute.
REFRESH_AFTER = 60.0
# A blob found corrupt by a read has its mtime set to the epoch: the next put of those bytes
# sees it in the stat it does anyway, hashes the blob and replaces it (see "Health").
CORRUPT_MARK_NS = 0
# What `_existing_blob` finds where a blob is about to be written.
_SOUND, _MISSING, _BAD = "sound", "missing", "bad"


def hash_stream(f: BinaryIO, on_chunk: Callable[[int], None] | None = None) -> str:
    """The sha256 of an open file from where it is, streamed 1 MB at a time (hashlib and
    readinto release the GIL, so files hash side by side in threads at disk speed);
    `on_chunk(bytes)` after each chunk."""
    h = hashlib.sha256()
    view = memoryview(bytearray(1 << 20))
    try:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        pass
    while got := f.readinto(view):
        h.update(view[:got])
        if on_chunk is not None:
            on_chunk(got)
    return h.hexdigest()


def hash_file(path: str | os.PathLike[str]) -> str:
    """The sha256 of the file at `path`."""
    with open(path, "rb", buffering=0) as f:
        return hash_stream(f)


def mark_corrupt(fd: int) -> None:
    """Mark the file open as `fd` (the inode read, not whatever the path names now) as
    found corrupt: mtime at the epoch. Only its owner (or root) may; otherwise nothing."""
    try:
        os.utime(fd, ns=(CORRUPT_MARK_NS, CORRUPT_MARK_NS))
    except OSError:
        pass


def check_digest(digest: object) -> str:
    if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
        raise BadDigest(f"not a digest (64 lowercase hex characters): {digest!r}")
    return digest


class _Beside(threading.Thread):
    """Runs `fn` on each chunk fed to it, in its own thread, in order.

    hashlib and os.write/readinto release the GIL on large buffers, so the chunk's other
    use in the feeding thread runs at the same time. After an error it keeps draining
    (so the feeder never blocks) and `finish` raises it; `stop()` skips what is queued.
    """

    _END = object()

    def __init__(self, fn: Callable[[memoryview], object], depth: int = 8) -> None:
        super().__init__(daemon=True)
        self._fn = fn
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stopped = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if self.error is None and not self._stopped.is_set():
                try:
                    self._fn(item)
                except BaseException as exc:  # noqa: BLE001 - re-raised by finish()
                    self.error = exc

    def feed(self, chunk: memoryview) -> None:
        self._queue.put(chunk)

    def stop(self) -> None:
        self._stopped.set()

    def finish(self) -> None:
        self._queue.put(self._END)
        self.join()
        if self.error is not None:
            raise self.error


# What this process kept lately, by a sample of its bytes: a prediction only (whether a
# large blob is likely new, so worth writing while it is hashed), never trusted for a
# digest. A blob is known by its header and 256 bytes spread over each tensor (training
# changes nearly every weight; a node left as it was samples the same); at most
# _KEPT_AT_MOST of them, the oldest forgotten first.
_KEPT: dict[bytes, str] = {}
_KEPT_AT_MOST = 4096
_KEPT_LOCK = threading.Lock()


def _fingerprint(plan: tensorfile.TensorPlan) -> bytes | None:
    h = hashlib.blake2b(plan.header, digest_size=16)
    for t in plan.ordered:
        if t.device.type != "cpu" or not t.is_contiguous() or t.is_conj() or t.is_neg():
            return None  # sampling it would cost a copy: not predicted, written beside
        if t.numel():
            data = memoryview(t.detach().reshape(-1).view(torch.uint8).numpy())
            h.update(data[:: max(1, len(data) // 256)].tobytes())
    return h.digest()


def _remember(seen: bytes | None, digest: str) -> str:
    if seen is not None:
        with _KEPT_LOCK:
            _KEPT.pop(seen, None)
            _KEPT[seen] = digest
            while len(_KEPT) > _KEPT_AT_MOST:
                _KEPT.pop(next(iter(_KEPT)))
    return digest


def _hash_plan(plan: tensorfile.TensorPlan) -> str:
    h = hashlib.sha256()
    for chunk in plan.chunks():
        h.update(chunk)
    return h.hexdigest()


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range(2) (Linux), or None where there is none."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # start writeback of the range's dirty pages; do not wait
# A new blob's pages are sent to the disk every this many bytes, while the next ones are
# still being copied, instead of all at the closing fsync (measured here: a 100 MB blob's
# write+fsync ~95 -> ~70 ms).
_WRITEBACK_EVERY = 4 << 20


def _write_chunks(fd: int, chunks: Iterable[memoryview]) -> None:
    """Write `chunks` to `fd` in order, starting the writeback of what is written as it
    goes (a hint only: durability is still the fsync's, and errors are still its own)."""
    written = started = 0
    for chunk in chunks:
        write_all(fd, chunk)
        written += len(chunk)
        if written - started >= _WRITEBACK_EVERY and _SYNC_FILE_RANGE is not None:
            _SYNC_FILE_RANGE(fd, started, written - started, _SYNC_FILE_RANGE_WRITE)
            started = written


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
        encoded = codecs.encode(value)  # all of it checked before anything is written
        plans = [tensorfile.plan(tensors) for _, tensors in encoded.maps]
        if encoded.loose:
            plans.append(tensorfile.plan(encoded.loose_map()))
        digests = self._put_plans(plans)
        for (ref, _), digest in zip(encoded.maps, digests, strict=False):
            ref["$tensors"] = digest
        loose = digests[-1] if encoded.loose else None
        return self.put(codecs.record_bytes(encoded.tree, loose))

    def recall_digest(self, digest: str, *, lazy: bool = False) -> object:
        """The value whose record is blob `digest`."""
        where = str(self.blob_path(digest))
        tree, loose_digest = codecs.parse_record(self.get(digest), where)
        wanted = list(dict.fromkeys(codecs.references(tree)))
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

    def put_tensors(self, tensors: dict[str, torch.Tensor]) -> str:
        """Keep one map of text to tensors as one safetensors blob; its digest."""
        return self._put_plan(tensorfile.plan(codecs.check_tensor_map(tensors, "tensors")))


class Store(Values):
    """A content-addressed store in `directory` (made if missing; refused, with nothing made,
    where it cannot be: see `check_folder`). See the module docs.

    `write_beside_hash`: on a local filesystem with a second CPU, write a large tensor blob
    while it is hashed instead of after: None, when it is likely new; True, always; False,
    never (see "Large values" in the module docs).
    `verify_existing`: a put of a blob already there hashes it, and replaces it when its
    bytes are wrong (see "Health"); what `soma repair` uses.
    `durability`: "durable" (names are durable before they are said bound, and never before
    what they reach) or "scratch" (no fsync at all: a machine crash means rerunning the
    round), refused on a store that says it is shared; `shared`: say so (writes its marker).
    See soma.store.files for what each fsync protects.
    """

    def __new__(cls, directory: str | os.PathLike[str] = "", **options: object) -> Store:
        """A path or a `file://` URL: this folder store. Any other URL (`s3://bucket/prefix`):
        the store on the backend its scheme names (soma.store.backend, the one place)."""
        head = str(directory).partition("://")[0].lower()
        if "://" in str(directory) and head != "file":
            from soma.store.backend import BackendStore, open_backend

            return BackendStore(open_backend(str(directory)), **options)  # type: ignore[return-value]
        return super().__new__(cls)

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        write_beside_hash: bool | None = None,
        verify_existing: bool = False,
        durability: str = DURABLE,
        shared: bool = False,
    ) -> None:
        self.directory = check_folder(directory)
        _check_durability(self.directory, durability, shared)
        self.durability = durability
        self._blobs = self.directory / "blobs"
        self._names = self.directory / "names"
        self._tmp = self.directory / "tmp"
        self._attic = self.directory / "attic"  # made by the first gc that needs it
        self.verify_existing = verify_existing
        for folder in (self.directory, self._blobs, self._names, self._tmp):
            folder.mkdir(parents=True, exist_ok=True)
        self._host = "".join(c if c.isalnum() or c in "-_" else "_" for c in os.uname().nodename)
        filesystem = _filesystem(self.directory)
        # see "Large values" in the module docs; only ever on a local filesystem. None:
        # where this process has not kept these very tensors unchanged before (a new blob).
        local = filesystem in _LOCAL_FILESYSTEMS
        self._beside = write_beside_hash is not False and local
        self._always_beside = bool(write_beside_hash) and local
        # What was written since the last pass (soma.store.files): files whose bytes, and
        # folders whose entries, must be durable before a name may reach them.
        self._whole = self.directory if can_syncfs(filesystem) else None
        self._unsynced: tuple[list[str], list[Path]] = ([], [])
        self._unsynced_lock = threading.Lock()
        # a group's names: (name, temporary, digest if claimed at commit, None if bound)
        self._queued: list[tuple[str, str, str | None]] | None = None
        self._grouping: int | None = None  # the thread whose group it is
        if shared and not (self.directory / SHARED_MARKER).exists():
            write_atomic(self.directory / SHARED_MARKER, b"this store is shared\n")

    def __repr__(self) -> str:
        return f"Store({str(self.directory)!r})"

    # --- bytes -----------------------------------------------------------------------

    def put(self, data: bytes | bytearray | memoryview) -> str:
        """Keep `data` as a blob; its sha256 hex digest. Already there (and sound, see
        "Health"): no write at all."""
        view = memoryview(data).cast("B")
        digest = hashlib.sha256(view).hexdigest()
        there = self._existing_blob(digest, len(view))
        if there != _SOUND:
            fd, tmp = self._temp("blob")
            try:
                _write_chunks(
                    fd,
                    (view[i : i + tensorfile.CHUNK] for i in range(0, len(view), tensorfile.CHUNK)),
                )
            except BaseException:
                self._abandon(fd, tmp)
                raise
            self._install(fd, tmp, digest, replace=there == _BAD)
        return digest

    def get(self, digest: str) -> bytes:
        """The bytes of blob `digest`, verified against it."""
        path, f = self._open_blob(digest)
        with f:
            data = f.read()
            self._verify(path, digest, hashlib.sha256(data).hexdigest(), f.fileno())
        return data

    def has(self, digest: str) -> bool:
        """Whether blob `digest` is in the store (put back from `attic/` if a gc left it
        there; see soma.health)."""
        path = self.blob_path(digest)
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return self._rescue(digest)
        if stat.S_ISLNK(st.st_mode):
            raise symlink_refused(path, "blob")
        return True

    def blob_path(self, digest: str) -> Path:
        """Where blob `digest` is (or would be)."""
        digest = check_digest(digest)
        return self._blobs / digest[:2] / digest

    # --- names -----------------------------------------------------------------------

    def bind(self, name: str, digest: str) -> None:
        """Point `name` at blob `digest`, replacing what it pointed at, atomically."""
        check_name(name)
        self._existing(digest, f"cannot bind {name!r}: ")
        tmp = self._small_temp(digest, "bind")
        if self._queued is not None and self._grouping == threading.get_ident():
            self._queued.append((name, tmp, None))  # bound when the group commits
            return
        self._sync()  # what it reaches, and its temporary, before the name
        self._rename_onto(name, tmp)
        self._sync()

    def claim(self, name: str, digest: str, *, at_commit: bool = False) -> bool:
        """Point `name` at `digest` if nobody has it: True if this call took it, else False.

        link(2) of a temporary onto the name, never rename and never resolve-then-bind;
        on any error from link the temporary's link count says whether it happened (NFS).
        `at_commit`, inside a group: for a name only its own writer claims (a client's
        record), claimed with the group's other names at its end, in its passes; True now
        means nobody held it when asked, and a writer that took it meanwhile with another
        digest makes the commit raise NameConflict naming it.
        """
        check_name(name)
        self._existing(digest, f"cannot claim {name!r}: ")
        if at_commit and self._queued is not None and self._grouping == threading.get_ident():
            if self.resolve(name) is not None:
                return False
            self._queued.append((name, self._small_temp(digest, "claim"), digest))
            return True
        tmp = self._small_temp(digest, "claim")
        self._sync()  # what it reaches, and its temporary, before the name
        won = self._link_onto(name, tmp)
        if won and (self._queued is None or self._grouping != threading.get_ident()):
            self._sync()  # in a group, with its other names at the end
        return won

    def _link_onto(self, name: str, tmp: str) -> bool:
        """Link the temporary `tmp` onto `name` unless it exists: True if this call did."""
        target = self._names / name

        def link(folder: int, base: str) -> bool:
            try:
                os.link(tmp, base, dst_dir_fd=folder)
                return True
            except OSError as exc:
                if os.stat(tmp).st_nlink == 2:
                    return True
                if exc.errno == errno.EEXIST and _is_folder(base, folder):
                    raise IsADirectoryError(errno.EISDIR, "is a folder", str(target)) from None
                if exc.errno == errno.EEXIST:
                    return False
                raise

        try:
            won = self._placing(name, link)
        finally:
            _unlink_quietly(tmp)
        if won:
            self._unsynced_folder(target.parent)
        return won

    @contextmanager
    def group(self) -> Iterator[None]:
        """A group commit: binds in this thread wait for the end of the block, where every
        blob written and every name's temporary are made durable in one pass, then every
        name is bound, then the names are made durable in a second pass (soma.store.files).
        What a process hosting several clients does with a round's contributions: a crash
        never leaves a name reaching a blob that is not durable. The block's binds are
        committed even when it raises (what was kept is whole). Nested: the outer commits."""
        if self._queued is not None:
            yield
            return
        self._queued, self._grouping = [], threading.get_ident()
        try:
            yield
        finally:
            queued, self._queued, self._grouping = self._queued, None, None
            self._commit(queued)

    def sync(self) -> None:
        """Make everything this store wrote durable now (nothing to do in scratch mode): for
        a digest about to be handed over outside the store (binds and claims do it)."""
        self._sync()

    def forget(self, name: str) -> bool:
        """Remove `name` (what `soma gc --keep-runs` does to the runs it drops); True if it
        was there. Its blobs stay until a gc finds nothing reaching them."""
        check_name(name)
        path = self._names / name
        try:
            if path.is_dir():
                raise NameConflict(f"{name!r} is a folder of names, not a name")
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        fsync_folder(path.parent)
        return True

    def resolve(self, name: str) -> str | None:
        """The digest `name` points at, or None. One small file read; never a blob."""
        check_name(name)
        path = self._names / name
        for attempt in range(3):
            try:
                with _open_file(self._names, name.split("/"), "name file") as f:
                    data = f.read(128)
                break
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return None
            except OSError as exc:  # a file replaced on another NFS client: look it up again
                if exc.errno != errno.ESTALE or attempt == 2:
                    raise
        text = data.decode("ascii", errors="replace").strip()
        try:
            return check_digest(text)
        except BadDigest:
            raise CorruptName(f"name file {path} does not hold a digest: {data[:80]!r}") from None

    def bound(self, prefix: str = "") -> list[str]:
        """The names starting with `prefix` (a plain text prefix), sorted.

        `bound("cifar/round/3/")` lists that round; `bound("cifar/round/3")` also has
        round 30. Reads folders only (one listing per folder under the prefix).
        """
        whole, partial = split_prefix(prefix)
        found: list[str] = []

        def walk(fd: int, above: str, first: bool) -> None:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name.startswith(".") or (first and not entry.name.startswith(partial)):
                        continue
                    if not entry.is_dir(follow_symlinks=False):
                        found.append(f"{above}{entry.name}")  # a link too: resolve refuses it
                        continue
                    try:  # a folder, unless replaced since the listing: never followed
                        inner = os.open(entry.name, _FOLDER, dir_fd=fd)
                    except (FileNotFoundError, NotADirectoryError):
                        continue
                    try:
                        walk(inner, f"{above}{entry.name}/", False)
                    finally:
                        os.close(inner)

        try:
            top = _open_in(self._names, whole, "folder of names")
        except (FileNotFoundError, NotADirectoryError):
            return []
        try:
            walk(top, "".join(f"{s}/" for s in whole), True)
        finally:
            os.close(top)
        return sorted(found)

    def entries(self, folder: str) -> list[str]:
        """What is directly in the folder of names `folder` (`"cifar/round/3/"`: that round's
        meetings), names and folders alike, sorted: one listing, where `bound` walks them."""
        whole, _ = split_prefix(folder.rstrip("/") + "/")
        try:
            fd = _open_in(self._names, whole, "folder of names")
        except (FileNotFoundError, NotADirectoryError):
            return []
        try:
            with os.scandir(fd) as found:
                return sorted(e.name for e in found if not e.name.startswith("."))
        finally:
            os.close(fd)

    # --- values ----------------------------------------------------------------------

    def get_tensors(self, digest: str, *, lazy: bool = False) -> dict[str, torch.Tensor]:
        """The tensors of safetensors blob `digest`, verified, then checked before use.

        Eager: one read into memory the tensors share. Lazy: a copy-on-write mmap of the
        file, so the pages are the file's until a tensor is written to.
        """
        path, f = self._open_blob(digest)
        with f:
            base = self._read_verified(path, f, digest, lazy)
        entries = tensorfile.read_header(memoryview(base.numpy()), str(path))
        return tensorfile.tensors_from(base, entries, str(path))

    def describe(self, digest: str) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """Each tensor's dtype and shape in tensor blob `digest`, from its header alone
        (nothing verified: whatever reads the data verifies it), opened as every read is."""
        path, f = self._open_blob(digest)
        with f:
            return tensorfile.describe(f, str(path))

    # --- housekeeping ----------------------------------------------------------------

    def sweep_temporaries(self, older_than: float = 24 * 3600.0) -> int:
        """Remove temporaries untouched for `older_than` seconds (left by killed writers)."""
        removed, cutoff = 0, time.time() - older_than
        with os.scandir(self._tmp) as entries:
            for entry in entries:
                try:
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
                except FileNotFoundError:
                    pass
        return removed

    # --- inside ----------------------------------------------------------------------

    def _unsynced_file(self, path: str | os.PathLike[str]) -> None:
        if self.durability == DURABLE:
            with self._unsynced_lock:
                self._unsynced[0].append(os.fspath(path))

    def _unsynced_folder(self, folder: Path) -> None:
        if self.durability == DURABLE:
            with self._unsynced_lock:
                self._unsynced[1].append(folder)

    def _sync(self) -> None:
        """One pass over what was written since the last (soma.store.files.make_durable)."""
        with self._unsynced_lock:
            files, folders = self._unsynced
            self._unsynced = ([], [])
        if files or folders:
            make_durable(files, folders, self._whole)

    def _rename_onto(self, name: str, tmp: str) -> None:
        """Rename the temporary `tmp` onto `name`, its folder left to the next pass."""
        target = self._names / name
        try:
            self._placing(name, lambda folder, base: os.rename(tmp, base, dst_dir_fd=folder))
        finally:
            _unlink_quietly(tmp)
        self._unsynced_folder(target.parent)

    def _commit(self, queued: list[tuple[str, str]]) -> None:
        """A group's end: one pass (blobs and temporaries), the names, a second pass. A name
        refused (NameConflict) is raised once the others are bound."""
        self._sync()
        failed: BaseException | None = None
        for name, tmp, claimed in queued:
            try:
                if claimed is None:
                    self._rename_onto(name, tmp)
                elif not self._link_onto(name, tmp) and self.resolve(name) != claimed:
                    raise NameConflict(
                        f"{name!r} was claimed by another writer while this one's group was "
                        f"being written: it holds {self.resolve(name)}, not {claimed}"
                    )
            except StoreError as error:
                failed = failed or error
        self._sync()
        if failed is not None:
            raise failed

    def _existing(self, digest: str, context: str = "") -> Path:
        path = self.blob_path(digest)
        if not self.has(digest):
            raise UnknownDigest(f"{context}no blob {digest} in {self}")
        return path

    def _open_blob(self, digest: str) -> tuple[Path, BinaryIO]:
        """Blob `digest` opened for reading (unbuffered), or UnknownDigest. A blob a gc is
        moving this instant is found in `attic/` and put back (see soma.health). Never
        through a symbolic link (`SymlinkInStore`), and only a regular file (`BadBlob`)."""
        path = self.blob_path(digest)
        for attempt in (0, 1):
            try:
                f = _open_file(self._blobs, [digest[:2], digest], "blob")
            except FileNotFoundError:
                if attempt or not self._rescue(digest):
                    break
                continue
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                f.close()
                raise BadBlob(f"blob {path} is not a regular file: the store never writes one")
            return path, f
        raise UnknownDigest(f"no blob {digest} in {self}")

    @staticmethod
    def _verify(path: Path, expected: str, actual: str, fd: int | None = None) -> None:
        """CorruptBlob unless `actual` is `expected`; the file read (`fd`) is marked corrupt
        first, so that the next put of those bytes replaces it (see "Health")."""
        if actual != expected:
            if fd is not None:
                mark_corrupt(fd)
            raise CorruptBlob(str(path), expected, actual)

    def _existing_blob(self, digest: str, size: int) -> str:
        """Whether blob `digest`, about to be written with `size` bytes, is already there:
        _SOUND (refreshed, nothing to write), _MISSING (write it) or _BAD (write it and
        replace what is there). Cheap: a stat, and the hash only when the size is wrong,
        the blob is marked corrupt, or this store was asked to (`verify_existing`)."""
        path = self.blob_path(digest)
        for _ in range(3):  # a gc may move it between two looks: each time, fetch it back
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                if not self._rescue(digest):
                    return _MISSING
                continue
            if st.st_size != size or not stat.S_ISREG(st.st_mode):
                return _BAD  # a link is replaced (renamed over), never followed
            if self.verify_existing or st.st_mtime_ns == CORRUPT_MARK_NS:
                try:
                    if hash_file(path) != digest:
                        return _BAD
                except FileNotFoundError:
                    continue
            if time.time() - st.st_mtime <= REFRESH_AFTER:
                self._unsynced_file(path)  # maybe another process's, not yet durable
                return _SOUND
            try:
                os.utime(path, follow_symlinks=False)  # a put is a use: gc's grace restarts
                return _SOUND
            except PermissionError:  # another user's blob: it ages from its own writes
                return _SOUND
            except FileNotFoundError:  # a gc moved it this instant: put it back, or write
                continue
        return _MISSING

    def _rescue(self, digest: str) -> bool:
        """Link blob `digest` back from `attic/`, where a gc moves a blob before deciding
        to delete it (see soma.health); False when it is not there either."""
        final = self.blob_path(digest)
        if not os.path.lexists(self._attic / digest):
            return False
        folder = self._blob_folder(digest)
        try:
            os.link(self._attic / digest, digest, dst_dir_fd=folder, follow_symlinks=False)
        except FileExistsError:
            return True
        except FileNotFoundError:  # taken back, or deleted, this instant
            return False
        finally:
            os.close(folder)
        fsync_folder(final.parent)
        return True

    def _temp(self, what: str) -> tuple[int, str]:
        name = f"{self._host}.{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(6)}.{what}"
        path = os.path.join(self._tmp, name)
        try:
            return create_new(path), path
        except FileNotFoundError:  # tmp/ removed by hand: make it again
            self._tmp.mkdir(exist_ok=True)
            return create_new(path), path

    def _seal(self, fd: int) -> None:
        """Make read-only (as the umask allowed it readable), then close; its bytes are made
        durable by the next pass (see soma.store.files), before any name reaches them."""
        try:
            os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) & ~0o222)
        finally:
            os.close(fd)

    def _small_temp(self, digest: str, what: str) -> str:
        fd, tmp = self._temp(what)
        try:
            write_all(fd, memoryview(f"{digest}\n".encode("ascii")))
        except BaseException:
            self._abandon(fd, tmp)
            raise
        self._seal(fd)
        self._unsynced_file(tmp)
        return tmp

    def _blob_folder(self, digest: str) -> int:
        """The fd of blob `digest`'s fan-out folder, made if missing, never through a link
        (`SymlinkInStore`): a planted link cannot take a blob outside the store."""
        try:
            return _open_in(self._blobs, [digest[:2]], "folder of blobs")
        except FileNotFoundError:
            blobs = _open_in(self._blobs, [], "folder of blobs")
            try:
                os.mkdir(digest[:2], dir_fd=blobs)
                self._unsynced_folder(self._blobs)
            except FileExistsError:
                pass
            finally:
                os.close(blobs)
            return _open_in(self._blobs, [digest[:2]], "folder of blobs")

    @staticmethod
    def _abandon(fd: int, tmp: str) -> None:
        """Drop a temporary without ever flushing it: truncate (the dirty pages go), close."""
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)
            _unlink_quietly(tmp)

    def _install(self, fd: int, tmp: str, digest: str, *, replace: bool = False) -> None:
        """Seal the temporary and link it in as blob `digest` (someone else's is as good);
        `replace`: rename it over what is there, which is corrupt (its bytes are wrong, and
        these are by definition the right ones)."""
        try:
            self._seal(fd)
            final = self.blob_path(digest)
            folder = self._blob_folder(digest)
            try:
                try:
                    if replace:
                        os.rename(tmp, digest, dst_dir_fd=folder)
                    else:
                        os.link(tmp, digest, dst_dir_fd=folder)
                except FileExistsError:
                    self._unsynced_file(final)  # the same bytes, maybe not yet durable
                    return
                except OSError:
                    if os.stat(tmp).st_nlink != 2:  # NFS: 2 says the link happened
                        raise
            finally:
                os.close(folder)
            self._unsynced_file(final)
            self._unsynced_folder(final.parent)
            if replace:  # names may reach it already: durable now, not at the next name
                self._sync()
        finally:
            _unlink_quietly(tmp)

    def _put_plans(self, plans: list[tensorfile.TensorPlan]) -> list[str]:
        """`_put_plan` of each of `plans`, in order. With a second CPU, each blob is still
        hashed first and written only if new, but the next blobs are hashed (in a thread)
        while this one is written: the hash and write of one blob never overlap, those of
        two do."""
        if len(plans) < 2 or self._beside or _cpus() < 2:
            return [self._put_plan(plan) for plan in plans]  # beside: each overlaps itself
        with ThreadPoolExecutor(1) as pool:
            hashes = [pool.submit(_hash_plan, plan) for plan in plans]
            try:
                return [
                    self._write_new(plan, h.result()) for plan, h in zip(plans, hashes, strict=True)
                ]
            finally:
                for h in hashes:
                    h.cancel()

    def _write_new(self, plan: tensorfile.TensorPlan, digest: str) -> str:
        """Write the blob of `plan`, whose sha256 is `digest`, unless it is already there."""
        there = self._existing_blob(digest, plan.nbytes)
        if there == _SOUND:
            return digest
        fd, tmp = self._temp("blob")
        try:
            _write_chunks(fd, plan.chunks())
        except BaseException:
            self._abandon(fd, tmp)
            raise
        self._install(fd, tmp, digest, replace=there == _BAD)
        return digest

    def _put_plan(self, plan: tensorfile.TensorPlan) -> str:
        """Write a planned safetensors blob: hash and write side by side (large, and likely
        new), or hash first and write only if new (small, or these tensors kept before)."""
        if plan.nbytes < _SPECULATE_FROM or not self._beside or _cpus() < 2:
            return self._write_new(plan, _hash_plan(plan))
        seen = _fingerprint(plan)
        if not self._always_beside and seen is not None and seen in _KEPT:
            return _remember(seen, self._write_new(plan, _hash_plan(plan)))
        return _remember(seen, self._speculate(plan))

    def _speculate(self, plan: tensorfile.TensorPlan) -> str:
        """Write the blob of `plan` while it is hashed; dropped unflushed if it was there."""
        fd, tmp = self._temp("blob")
        writer = _Beside(lambda chunk: write_all(fd, chunk))
        h = hashlib.sha256()
        try:
            for chunk in plan.chunks():
                writer.feed(chunk)
                h.update(chunk)
        except BaseException:
            writer.stop()
            try:
                writer.finish()
            finally:
                self._abandon(fd, tmp)
            raise
        digest = h.hexdigest()
        existing = self._existing_blob(digest, plan.nbytes)
        there = existing == _SOUND
        if there:
            writer.stop()  # what is still queued is never written
        try:
            writer.finish()
        except BaseException:
            self._abandon(fd, tmp)
            if there:
                return digest
            raise
        if there:
            self._abandon(fd, tmp)
        else:
            self._install(fd, tmp, digest, replace=existing == _BAD)
        return digest

    def _read_verified(self, path: Path, f: BinaryIO, digest: str, lazy: bool) -> torch.Tensor:
        """The whole blob as one uint8 tensor, verified: a view of a copy-on-write mmap of
        the file (lazy), or memory of its own read while the hash runs beside (eager)."""
        h = hashlib.sha256()
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            base = torch.empty(0, dtype=torch.uint8)
        elif lazy:
            mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
            mapped.madvise(mmap.MADV_SEQUENTIAL)
            with memoryview(mapped) as view:
                for start in range(0, size, tensorfile.CHUNK):
                    h.update(view[start : start + tensorfile.CHUNK])
            mapped.madvise(mmap.MADV_NORMAL)
            base = torch.frombuffer(mapped, dtype=torch.uint8)
        else:
            base = torch.empty(size, dtype=torch.uint8)  # not zeroed: read fills it
            view = memoryview(base.numpy())
            hasher = _Beside(h.update)
            start = 0
            try:
                while start < size:
                    got = f.readinto(view[start : start + tensorfile.CHUNK])
                    if not got:
                        break
                    hasher.feed(view[start : start + got])
                    start += got
            finally:
                hasher.finish()
            base = base[:start]
        self._verify(path, digest, h.hexdigest(), f.fileno())
        return base

    def _read_many(self, digests: list[str], lazy: bool) -> list[dict[str, torch.Tensor]]:
        """Several tensor blobs, verified side by side (sha256 is one core per blob)."""
        workers = min(len(digests), _cpus(), 4)
        if workers <= 1:
            return [self.get_tensors(d, lazy=lazy) for d in digests]
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda d: self.get_tensors(d, lazy=lazy), digests))

    def _placing(self, name: str, place: Callable[[int, str], bool | None]) -> bool | None:
        """Run `place(folder, base)` (a link or rename onto names/<name>, relative to its
        folder's fd, opened with no link followed on the way: `SymlinkInStore`), making its
        folders on demand and turning "a name is a folder" or "a folder is a name" into
        `NameConflict`."""
        segments = name.split("/")

        def at_its_folder() -> bool | None:
            folder = _open_in(self._names, segments[:-1], "folder of names")
            try:
                return place(folder, segments[-1])
            finally:
                os.close(folder)

        try:
            try:
                return at_its_folder()
            except FileNotFoundError:
                self._make_parents(name)
                return at_its_folder()
        except NotADirectoryError:
            raise self._conflict_above(name) from None
        except IsADirectoryError:
            below = self.bound(name + "/")
            example = f" (e.g. {below[0]!r})" if below else " (an empty folder: remove it)"
            raise NameConflict(
                f"{name!r} is a folder of names{example}; a name cannot also be a folder"
            ) from None

    def _conflict_above(self, name: str) -> NameConflict:
        segments = name.split("/")
        for i in range(1, len(segments)):
            above = "/".join(segments[:i])
            if (self._names / above).is_file():
                return NameConflict(
                    f"{name!r} cannot be a name: {above!r} is one, and a name cannot also be "
                    "a folder of names"
                )
        return NameConflict(f"{name!r} cannot be a name: a folder on its path is a file")

    def _make_parents(self, name: str) -> None:
        """The folders of `name` made where missing, each below the last one opened with no
        link followed, so a planted link cannot make one outside the store."""
        segments = name.split("/")[:-1]
        folder = _open_in(self._names, [], "folder of names")
        try:
            for i, segment in enumerate(segments):
                try:
                    os.mkdir(segment, dir_fd=folder)
                    self._unsynced_folder(self._names.joinpath(*segments[:i]))
                except FileExistsError:
                    pass
                except NotADirectoryError:
                    raise self._conflict_above(name) from None
                try:
                    inner = os.open(segment, _FOLDER, dir_fd=folder)
                except OSError as error:
                    if _a_link(error, segment, folder):
                        where = self._names.joinpath(*segments[: i + 1])
                        raise symlink_refused(where, "folder of names") from None
                    if error.errno == errno.ENOTDIR:
                        raise self._conflict_above(name) from None
                    raise
                os.close(folder)
                folder = inner
        finally:
            os.close(folder)


def _check_durability(folder: Path, durability: object, shared: bool) -> None:
    """Refuse, before anything is made, a durability that is not one, and scratch on a store
    that says it is shared (its `SHARED_MARKER` file, or `shared=True`)."""
    if durability not in DURABILITIES:
        raise BadStore(
            f"durability {durability!r} is not one of {', '.join(DURABILITIES)} (store {folder})"
        )
    marker = folder / SHARED_MARKER
    if durability == SCRATCH and (shared or marker.exists()):
        said = "shared=True" if shared else f"its marker {marker}"
        raise BadStore(
            f"store {folder} says it is shared ({said}): durability 'scratch' (no fsync, a "
            "crash loses the round) is refused on it; use 'durable', or a store of your own"
        )


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
