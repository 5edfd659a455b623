"""`Store`, the store at a path or a URL: a folder store, or the store on the backend a URL's
scheme names. It lives here, not in soma/store/__init__.py, because a folder store imports
torch (its tensor blobs): `import soma.store` does not, and the package imports this module
on the first use of `Store` (see soma/store/__init__.py)."""

from __future__ import annotations

import os

from soma.store.folder import FolderStore


class Store(FolderStore):
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
    See soma.files for what each fsync protects.
    """

    __module__ = "soma.store"  # its public home, where it always was (and "the module docs")

    def __new__(cls, directory: str | os.PathLike[str] = "", **options: object) -> Store:
        """A path or a `file://` URL: this folder store. Any other URL (`s3://bucket/prefix`):
        the store on the backend its scheme names (soma.store.backend, the one place)."""
        head = str(directory).partition("://")[0].lower()
        if "://" in str(directory) and head != "file":
            from soma.store.backend import BackendStore, open_backend

            return BackendStore(open_backend(str(directory)), **options)  # type: ignore[return-value]
        return super().__new__(cls)
