"""What soma.health asks of a store to verify, repair and collect it, the same on a folder
and on a bucket: which blobs are there (and what else is), the store's clock, a blob opened
for hashing, one blob removed safely beside live writers, what killed writers left behind.

Each kind of store keeps its own protocol behind these: a folder's attic and temporaries
(`FolderKeeping`), a bucket's attic, refresh markers and multipart uploads, which its backend
implements (`BucketKeeping`, soma.store.s3.gc). soma.health calls them and branches on
neither, so a third backend is one more implementation of this small API. Here too what
the stores and gc agree on about a blob's age: a put refreshes it (`REFRESH_AFTER`), and a
blob found corrupt is marked for the next put to replace (`mark_corrupt`).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any, BinaryIO

DIGEST_LENGTH = 64

# Putting a blob that is already there refreshes its mtime (gc's grace, soma.health) when it
# is older than this: a blob re-put every round costs a stat, and a utime once a minute.
REFRESH_AFTER = 60.0
# A blob found corrupt by a read has its mtime set to the epoch: the next put of those bytes
# sees it in the stat it does anyway, hashes the blob and replaces it (see "Health").
CORRUPT_MARK_NS = 0


def mark_corrupt(fd: int) -> None:
    """Mark the file open as `fd` (the inode read, not whatever the path names now) as
    found corrupt: mtime at the epoch. Only its owner (or root) may; otherwise nothing."""
    try:
        os.utime(fd, ns=(CORRUPT_MARK_NS, CORRUPT_MARK_NS))
    except OSError:
        pass


def is_digest(name: str) -> bool:
    """Whether `name` is how the store names a blob: 64 lowercase hex digits."""
    return len(name) == DIGEST_LENGTH and all(c in "0123456789abcdef" for c in name)


@dataclass(frozen=True)
class BlobFile:
    """One blob as listed: its digest, where it is (for messages), size and last touch."""

    digest: str
    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class Temporary:
    """A file a writer is writing (or a killed one left): its name tells whose
    (`<host>.<pid>.<tid>.<random>.<what>`), its age whether it is abandoned."""

    name: str
    path: str
    size: int
    mtime: float


@dataclass
class Swept:
    """What a sweep of temporaries did (or, in a dry run, would do)."""

    removed: int = 0
    removed_bytes: int = 0
    kept: int = 0
    uploads_aborted: int = 0


def _unlink(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def files(folder: str | os.PathLike[str]) -> list[os.DirEntry]:
    """The files in one of the store's folders; none through a symbolic link."""
    if os.path.islink(folder):
        return []
    try:
        with os.scandir(folder) as entries:
            return [e for e in entries if e.is_file(follow_symlinks=False)]
    except FileNotFoundError:
        return []


class FolderKeeping:
    """A folder store's side (mixed into soma.store.folder.FolderStore): blobs under
    `blobs/<2 hex>/<digest>`, a gc's attic `attic/`, writers' temporaries in `tmp/`."""

    directory: Any
    _attic: Any
    _host: str
    _tmp: Any
    _open_blob: Callable[[str], tuple[str, BinaryIO]]
    _rescue: Callable[[str], bool]
    blob_path: Callable[[str], Any]

    @property
    def host(self) -> str:
        """This machine's name as temporaries spell it (whose a temporary is)."""
        return self._host

    def open_blob(self, digest: str) -> tuple[str, BinaryIO]:
        """Blob `digest` opened for reading, never through a link (UnknownDigest, BadBlob,
        SymlinkInStore otherwise): for hashing it as it is."""
        return self._open_blob(digest)

    def clock(self) -> float:
        """Now, as the store's files are dated (this machine's clock)."""
        return time.time()

    def blob_files(self) -> tuple[dict[str, BlobFile], list[str]]:
        """Every blob file (by digest) and every stray file (a path that is not a blob's)."""
        blobs: dict[str, BlobFile] = {}
        strays: list[str] = []
        top = self.directory / "blobs"
        if top.is_symlink():  # never followed; `symlinks` reports it
            return blobs, strays
        with os.scandir(top) as folders:
            for folder in folders:
                if folder.is_symlink():  # never followed; `symlinks` reports it
                    continue
                if not folder.is_dir(follow_symlinks=False):
                    strays.append(folder.path)
                    continue
                with os.scandir(folder.path) as entries:
                    for entry in entries:
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        if stat.S_ISLNK(st.st_mode):  # `symlinks` reports it
                            continue
                        good = is_digest(entry.name) and entry.name[:2] == folder.name
                        if good and entry.is_file(follow_symlinks=False):
                            blobs[entry.name] = BlobFile(
                                entry.name, entry.path, st.st_size, st.st_mtime
                            )
                        else:
                            strays.append(entry.path)
        return blobs, sorted(strays)

    def blob_present(self, digest: str) -> bool:
        """Whether blob `digest`'s file is there now (put again since it was listed)."""
        return self.blob_path(digest).exists()

    def symlinks(self) -> list[str]:
        """Every symbolic link anywhere under the store, sorted: the store makes none, so each
        is somebody else's, and nothing here follows one. One listing per folder."""
        found: list[str] = []

        def walk(folder: str) -> None:
            try:
                with os.scandir(folder) as entries:
                    listed = list(entries)
            except (FileNotFoundError, NotADirectoryError):
                return
            for entry in listed:
                if entry.is_symlink():
                    found.append(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    walk(entry.path)

        walk(str(self.directory))
        return sorted(found)

    def collect_blob(self, digest: str, cutoff: float) -> int | None:
        """Remove blob `digest` unless it was touched after `cutoff`: moved to `attic/`,
        stat-ed there (a put between gc's listing and the move refreshed it: it goes back),
        and only then unlinked; a put after the move links it back from `attic/` itself. The
        bytes freed, or None when it stays (or was gone already)."""
        final, attic = self.blob_path(digest), self._attic / digest
        for attempt in (0, 1):
            try:
                os.rename(final, attic)
                break
            except FileNotFoundError:
                if attempt or not final.exists():
                    return None
                self._attic.mkdir(exist_ok=True)  # the first gc that needs it
        return self._settle(digest, cutoff, keep=False)

    def remove_corrupt(self, digest: str) -> int | None:
        """Remove a blob that is still marked corrupt and that nothing needs (a put of its
        bytes since replaced it: then it is no longer untouched, and stays)."""
        return self.collect_blob(digest, cutoff=1e-9)

    def _settle(self, digest: str, cutoff: float, *, keep: bool) -> int | None:
        """Decide a blob in `attic/`: back to its place if it must stay (`keep`, or touched
        after `cutoff`), else unlinked; the bytes freed, or None when it went back."""
        attic = self._attic / digest
        try:
            st = os.lstat(attic)
        except FileNotFoundError:
            return None
        if keep or not st.st_mtime < cutoff:
            self._rescue(digest)
            _unlink(attic)
            return None
        _unlink(attic)
        return st.st_size

    def settle_attic(self, reached: Container[str], cutoff: float, dry_run: bool) -> int:
        """Decide each blob a killed gc left in `attic/` (`reached` ones go back); how many
        went back."""
        restored = 0
        for entry in files(self._attic):
            if not is_digest(entry.name) or dry_run:
                continue
            if self._settle(entry.name, cutoff, keep=entry.name in reached) is None:
                restored += 1
        return restored

    def attic_count(self) -> int:
        """Blobs a killed gc left in `attic/` (the next gc decides them)."""
        return len(files(self._attic))

    def temporaries(self) -> list[Temporary]:
        """The files in `tmp/`: writers' temporaries, live or left by killed writers."""
        found = []
        for entry in files(self._tmp):
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            found.append(Temporary(entry.name, entry.path, st.st_size, st.st_mtime))
        return found

    def sweep_temporaries(
        self, cutoff: float, abandoned: Callable[[Temporary], bool], dry_run: bool
    ) -> Swept:
        """Remove the temporaries `abandoned` says killed writers left (gc's rule, which
        knows `cutoff` and whose writers are gone: soma.health.collecting); count the rest
        as kept."""
        swept = Swept()
        for temporary in self.temporaries():
            if not abandoned(temporary):
                swept.kept += 1
                continue
            if not dry_run:
                _unlink(temporary.path)
            swept.removed += 1
            swept.removed_bytes += temporary.size
        return swept


class BucketKeeping:
    """A bucket store's side (mixed into soma.store.backend.BackendStore): its backend keeps
    the protocol (soma.store.s3.gc); a bucket has no links, no attic a reader sees, and its
    temporaries are multipart uploads."""

    backend: Any
    directory: Any
    _open_blob: Callable[[str], tuple[str, BinaryIO]]
    has: Callable[[str], bool]
    blob_path: Callable[[str], Any]
    host = ""  # a bucket's temporaries are uploads, aged by the server, not named by host

    def check_writable(self) -> None:
        """Nothing to ask before writing: a bucket's credentials are checked by its first
        request, which fails in one line (soma.store.s3.backend)."""

    def open_blob(self, digest: str) -> tuple[str, BinaryIO]:
        """Blob `digest` opened for reading (UnknownDigest otherwise): for hashing it."""
        return self._open_blob(digest)

    def clock(self) -> float:
        """Now, as the server dates its objects (one HEAD of the bucket)."""
        return float(self.backend.now())

    def blob_files(self) -> tuple[dict[str, BlobFile], list[str]]:
        """One listing of the blobs' keys, sizes and dates; keys not a blob's are strays."""
        blobs: dict[str, BlobFile] = {}
        strays: list[str] = []
        for key, size, mtime in self.backend.blobs():
            digest = key.rsplit("/", 1)[-1]
            if is_digest(digest) and key == f"{digest[:2]}/{digest}":
                blobs[digest] = BlobFile(digest, self.blob_path(digest), size, mtime)
            else:
                strays.append(f"{self.directory}/blobs/{key}")
        return blobs, sorted(strays)

    def blob_present(self, digest: str) -> bool:
        return self.has(digest)

    def symlinks(self) -> list[str]:
        return []

    def collect_blob(self, digest: str, cutoff: float) -> int | None:
        return self.backend.collect_blob(digest, cutoff)

    def remove_corrupt(self, digest: str) -> int | None:
        """A bucket marks no blob corrupt: the blob is deleted as it is now."""
        return self.backend.delete_blob(digest)

    def settle_attic(self, reached: Container[str], cutoff: float, dry_run: bool) -> int:
        """Put back every blob a killed gc left in the bucket's attic (judged again at the
        next gc); how many."""
        return 0 if dry_run else int(self.backend.settle_attic())

    def attic_count(self) -> int:
        return 0

    def temporaries(self) -> list[Temporary]:
        return []

    def sweep_temporaries(
        self, cutoff: float, abandoned: Callable[[Temporary], bool], dry_run: bool
    ) -> Swept:
        """Abort the multipart uploads not written since `cutoff` and forget the refresh
        markers written before it, both dated by the server (`abandoned`, the rule for a
        folder's named temporaries, has nothing to judge here)."""
        if not dry_run:
            self.backend.forget_markers(cutoff)
        aborted, kept = self.backend.abandoned_uploads(cutoff, dry_run)
        return Swept(kept=kept, uploads_aborted=aborted)
