"""The folder store: blobs by digest and names that point at them, in a shared folder.

Why a module of its own: this is the store on a path (or a `file://` URL), the reference
that every backend's store (soma.store.backend) mirrors; soma.store's docs describe its
layout and guarantees, and `soma.store.Store` is the entry point that opens it. Its parts
live beside it: no-follow opens (soma.store.folder.safe_open), the hash-and-write pipeline
(soma.store.folder.pipeline), the passes and the group commit (soma.store.folder.commit), values
(soma.store.values).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from soma.files import (
    DURABLE,
    SHARED_MARKER,
    can_syncfs,
    create_new,
    fsync_folder,
    write_all,
    write_atomic,
)
from soma.lazy import OnUse
from soma.store.errors import BadBlob, CorruptBlob, NameConflict, UnknownDigest
from soma.store.folder import commit, name_files, retries, safe_open, unwritable, write_cache
from soma.store.folder.commit import GroupCommit
from soma.store.folder.held_folders import HeldFolders
from soma.store.folder.pipeline import (
    _BAD,
    _LOCAL_FILESYSTEMS,
    _MISSING,
    _SOUND,
    Pipeline,
    _filesystem,
    _write_chunks,
)
from soma.store.folder.retries import patiently
from soma.store.folder.safe_open import (
    _a_link,
    _is_folder,
    _open_in,
    check_folder,
    symlink_refused,
)
from soma.store.folder.write_cache import Written
from soma.store.hashing import CHUNK, check_digest, hash_file
from soma.store.keeping import CORRUPT_MARK_NS, REFRESH_AFTER, FolderKeeping, mark_corrupt
from soma.store.names import check_name, split_prefix
from soma.store.opening import Store
from soma.store.patience import Patience
from soma.store.values import Values

if TYPE_CHECKING:
    import torch

    from soma.store import tensorfile
else:  # torch only where a blob holds tensors (soma.lazy.OnUse)
    torch = OnUse("torch", globals())
    tensorfile = OnUse("soma.store.tensorfile", globals())


class FolderStore(Pipeline, GroupCommit, Store, FolderKeeping):
    """The store in a folder; opened as `soma.store.Store(directory, ...)`, whose docs say
    what each option means."""

    IMPLEMENTATION = True

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
        commit._check_durability(self.directory, durability, shared)
        self.durability = durability
        self._blobs, self._paths = self.directory / "blobs", {}  # _paths: see blob_path
        self._held = HeldFolders(self._blobs)  # see `reading`
        self._written = Written()  # small blobs this store wrote: read from memory
        self._names = self.directory / "names"
        self._tmp = self.directory / "tmp"
        self._attic = self.directory / "attic"  # made by the first gc that needs it
        self.verify_existing = verify_existing
        self.patience = Patience.from_environment()  # how long a failing folder is retried
        unwritable.make_folders(self.directory, self._folders())
        self._host = "".join(c if c.isalnum() or c in "-_" else "_" for c in os.uname().nodename)
        filesystem = _filesystem(self.directory)
        # see "Large values" in the module docs; only ever on a local filesystem. None:
        # where this process has not kept these very tensors unchanged before (a new blob).
        local = filesystem in _LOCAL_FILESYSTEMS
        self._beside = write_beside_hash is not False and local
        self._always_beside = bool(write_beside_hash) and local
        # What was written since the last pass (soma.files): files whose bytes, and
        # folders whose entries, must be durable before a name may reach them.
        self._whole = self.directory if can_syncfs(filesystem) else None
        self._unsynced: tuple[list[str], list[str]] = ([], [])
        self._unsynced_lock = threading.Lock()
        # a group's names: (name, temporary, digest if claimed at commit, None if bound)
        self._queued: list[tuple[str, str, str | None]] | None = None
        self._grouping: int | None = None  # the thread whose group it is
        if shared and not (self.directory / SHARED_MARKER).exists():
            with unwritable.refusing(self.directory):
                write_atomic(self.directory / SHARED_MARKER, b"this store is shared\n")

    def check_writable(self) -> None:
        """`UnwritableStore` unless this process may write the store's folders: what every
        process that runs a round asks when it opens the store (soma.config.stores.open_store),
        so that a read-only store is refused in one line before anything is trained, not
        met at its first write. A reader never asks: a store it may only read is read."""
        unwritable.check_folders(self.directory, self._folders())

    def _folders(self) -> tuple[Path, ...]:
        return (self.directory, self._blobs, self._names, self._tmp)

    def __repr__(self) -> str:
        return f"Store({str(self.directory)!r})"

    # --- bytes -----------------------------------------------------------------------

    def put(self, data: bytes | bytearray | memoryview) -> str:
        """Keep `data` as a blob; its sha256 hex digest. Already there (and sound, see
        "Health"): no write at all."""
        view = memoryview(data).cast("B")
        kept = None
        if len(view) <= write_cache.SMALL:  # bytes of its own (a caller's buffer copied once):
            kept = data if isinstance(data, bytes) else view.tobytes()  # hashed, written, kept
            view = memoryview(kept)
        digest = hashlib.sha256(view).hexdigest()
        there = self._existing_blob(digest, len(view))
        if there != _SOUND:
            fd, tmp = self._temp("blob")
            try:
                _write_chunks(
                    fd,
                    (view[i : i + CHUNK] for i in range(0, len(view), CHUNK)),
                )
            except BaseException:
                self._abandon(fd, tmp)
                raise
            self._install(fd, tmp, digest, replace=there == _BAD)
        if kept is not None:  # the very bytes hashed and written: read from memory here
            self._written.add(digest, kept)
        return digest

    def get(self, digest: str) -> bytes:
        """The bytes of blob `digest`, verified against it."""
        return self._get_at_most(digest, None)

    def _get_at_most(self, digest: str, limit: int | None) -> bytes:
        """`get`, refused before a byte is read when the file is longer than `limit` (a
        record's cap, soma.store.values): a file planted under a record's digest costs its
        size on disk, not its size in memory. A small blob this store wrote lately is the
        bytes it hashed then (soma.store.folder.write_cache): no file is read."""
        kept = self._written.get(check_digest(digest))
        if kept is not None:
            _within(self._where(digest), len(kept), limit)
            return kept
        path, f = self._open_blob(digest)
        with f:
            _within(path, os.fstat(f.fileno()).st_size, limit)
            data = f.read()
            self._verify(path, digest, hashlib.sha256(data).hexdigest(), f.fileno())
        return data

    def has(self, digest: str) -> bool:
        """Whether blob `digest` is in the store (put back from `attic/` if a gc left it
        there; see soma.health)."""
        path = self._where(digest)
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return self._rescue(digest)
        if stat.S_ISLNK(st.st_mode):
            raise symlink_refused(path, "blob")
        return True

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """Inside, this thread opens each fan-out folder once for its reads
        (soma.store.folder.held_folders)."""
        return self._held.holding()

    def blob_path(self, digest: str) -> Path:
        """Where blob `digest` is (or would be); kept in `_paths` (~35 asks a contribution)."""
        found = self._paths.get(digest)
        if found is None:
            if len(self._paths) >= 4096:
                self._paths.clear()
            found = self._paths[digest] = self._blobs.joinpath(check_digest(digest)[:2], digest)
        return found

    def _where(self, digest: str) -> str:
        """`blob_path` as text, made without pathlib (a Path costs ~4 us): what reads name."""
        return f"{self._blobs}/{check_digest(digest)[:2]}/{digest}"

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
        """Point `name` at `digest` if nobody has it: True if this call took it, else False
        (see `_claim_once`). Retried within the store's patience when the file system fails
        for a while; an attempt after one that failed midway, which finds the name holding
        `digest`, took it (the failed attempt linked it before failing: its fsync, say). A
        claimer of the same name with the same digest would be told the same, and nothing
        soma claims twice with one digest hangs on which of them it was: a client's record
        is compared by content, an averaging's holder is unique."""
        retried = False

        def attempt() -> bool:
            nonlocal retried
            again, retried = retried, True
            won = self._claim_once(name, digest, at_commit=at_commit)
            return won or (again and self.resolve(name) == digest)

        with unwritable.refusing(self.directory):
            return self.patience.retrying(
                attempt,
                transient=retries.transient,
                what=lambda: f"claim of {name!r} in {self!r}",
            )

    def _claim_once(self, name: str, digest: str, *, at_commit: bool = False) -> bool:
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

        def link(folder: int, base: str) -> bool:
            try:
                os.link(tmp, base, dst_dir_fd=folder)
                return True
            except OSError as exc:
                if os.stat(tmp).st_nlink == 2:
                    return True
                if exc.errno == errno.EEXIST and _is_folder(base, folder):
                    where = str(self._names / name)
                    raise IsADirectoryError(errno.EISDIR, "is a folder", where) from None
                if exc.errno == errno.EEXIST:
                    return False
                raise

        try:
            won = self._placing(name, link)
        finally:
            _unlink_quietly(tmp)
        if won:
            self._unsynced_folder(self._folder_of(name))
        return won

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
        return name_files.read_name(self._names, name)

    def resolve_many(self, names: Sequence[str]) -> list[str | None]:
        """What `resolve` says of each of `names`, in order: the names of one folder read
        from one opening of it (soma.store.folder.name_files)."""
        for name in names:
            check_name(name)
        return name_files.read_names(self._names, names)

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
                        inner = os.open(entry.name, safe_open._FOLDER, dir_fd=fd)
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
        file, so the pages are the file's until a tensor is written to. A small blob this
        store wrote lately: a copy of the bytes it hashed then (soma.store.folder.write_cache).
        """
        kept = self._written.get(check_digest(digest))
        if kept is not None:
            path = self._where(digest)
            base = torch.frombuffer(bytearray(kept), dtype=torch.uint8)
        else:
            path, f = self._open_blob(digest)
            with f:
                base = self._read_verified(path, f, digest, lazy)
        entries = tensorfile.read_header(memoryview(base.numpy()), path)
        return tensorfile.tensors_from(base, entries, path)

    def describe(self, digest: str) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """Each tensor's dtype and shape in tensor blob `digest`, from its header alone
        (nothing verified: whatever reads the data verifies it), opened as every read is."""
        path, f = self._open_blob(digest)
        with f:
            return tensorfile.describe(f, path)

    # Every request the rest of soma makes, retried within the store's patience (`claim`
    # above has its own: see there). Nested ones (put_value's puts) retry innermost first;
    # one that ran out raises StoreUnavailable, which nothing retries again.
    put = patiently(put)
    get = patiently(get)
    has = patiently(has)
    bind = patiently(bind)
    forget = patiently(forget)
    resolve = patiently(resolve)
    resolve_many = patiently(resolve_many)
    bound = patiently(bound)
    entries = patiently(entries)
    get_tensors = patiently(get_tensors)
    describe = patiently(describe)
    put_value = patiently(Values.put_value)
    put_tensors = patiently(Values.put_tensors)
    recall_digest = patiently(Values.recall_digest)

    def _commit(self, queued: list[Any]) -> None:
        """A group's end (soma.store.folder.commit), an unwritable store said as at any write."""
        with unwritable.refusing(self.directory):
            super()._commit(queued)

    # --- inside ----------------------------------------------------------------------

    def _rename_onto(self, name: str, tmp: str) -> None:
        """Rename the temporary `tmp` onto `name`, its folder left to the next pass."""
        try:
            self._placing(name, lambda folder, base: os.rename(tmp, base, dst_dir_fd=folder))
        finally:
            _unlink_quietly(tmp)
        self._unsynced_folder(self._folder_of(name))

    def _folder_of(self, name: str) -> str:
        """The folder of `name`'s file, as text (a Path of a long name costs ~10 us)."""
        above, _, _ = name.rpartition("/")
        return f"{self._names}/{above}" if above else str(self._names)

    def _existing(self, digest: str, context: str = "") -> Path:
        if not self.has(digest):
            raise UnknownDigest(f"{context}no blob {digest} in {self}")
        return self.blob_path(digest)

    def _open_blob(self, digest: str) -> tuple[str, BinaryIO]:
        """Blob `digest` opened for reading (unbuffered), or UnknownDigest. A blob a gc is
        moving this instant is found in `attic/` and put back (see soma.health). Never
        through a symbolic link (`SymlinkInStore`), and only a regular file (`BadBlob`)."""
        path = self._where(digest)
        for attempt in (0, 1):
            try:
                f = self._held.open(digest)
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
    def _verify(path: str, expected: str, actual: str, fd: int | None = None) -> None:
        """CorruptBlob unless `actual` is `expected`; the file read (`fd`) is marked corrupt
        first, so that the next put of those bytes replaces it (see "Health")."""
        if actual != expected:
            if fd is not None:
                mark_corrupt(fd)
            raise CorruptBlob(path, expected, actual)

    def _existing_blob(self, digest: str, size: int) -> str:
        """Whether blob `digest`, about to be written with `size` bytes, is already there:
        _SOUND (refreshed, nothing to write), _MISSING (write it) or _BAD (write it and
        replace what is there). Cheap: a stat, and the hash only when the size is wrong,
        the blob is marked corrupt, or this store was asked to (`verify_existing`)."""
        path = self._where(digest)
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
        if not os.path.lexists(f"{self._attic}/{digest}"):
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
        fsync_folder(self.blob_path(digest).parent)
        return True

    def _temp(self, what: str) -> tuple[int, str]:
        name = f"{self._host}.{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(6)}.{what}"
        path = f"{self._tmp}/{name}"
        try:
            return create_new(path), path
        except FileNotFoundError:  # tmp/ removed by hand: make it again
            self._tmp.mkdir(exist_ok=True)
            return create_new(path), path

    def _seal(self, fd: int) -> None:
        """Make read-only (as the umask allowed it readable), then close; its bytes are made
        durable by the next pass (see soma.files), before any name reaches them."""
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
            final = self._where(digest)
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
            self._unsynced_folder(final.rpartition("/")[0])
            if replace:  # names may reach it already: durable now, not at the next name
                self._sync()
        finally:
            _unlink_quietly(tmp)

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
                    inner = os.open(segment, safe_open._FOLDER, dir_fd=folder)
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


def _within(path: str, size: int, limit: int | None) -> None:
    """BadBlob unless a blob of `size` bytes is within `limit` (None: any size)."""
    if limit is not None and size > limit:
        raise BadBlob(f"blob {path} is {size} bytes, more than the {limit} allowed here")


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
