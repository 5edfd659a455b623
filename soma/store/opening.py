"""`Store`, the one store type: a store at a path or a URL, whatever keeps it.

Why a module of its own: `Store(location)` picks the implementation by the location's scheme
here, the one place (a path or `file://`: the folder store, soma.store.folder; any other
scheme: the store on that scheme's backend, soma.store.backend, whose `BACKENDS` names the
backend's module). Every implementation subclasses `Store`, so `isinstance(x, Store)` holds
and `store: Store` is right whatever the place. Neither implementation nor torch is imported
before a store of its kind is opened (see soma/store/__init__.py).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from soma.store.values import Values

# the implementation a location's scheme opens, as "module:class", imported when first opened
# (an implementation imports this module: it subclasses Store); every other scheme is a
# backend's (soma.store.backend.BACKENDS), opened by BACKEND
FOLDER = "soma.store.folder.store:FolderStore"
BACKEND = "soma.store.backend:BackendStore"

# a subclass of Store outside soma (say, one that wraps `resolve`) joined with the
# implementation it opens: one class per pair, made on first use
_JOINED: dict[tuple[type, type], type] = {}


def scheme_of(location: object) -> str | None:
    """The URL scheme of a store location ("s3"), "file" for file://, None for a path."""
    text = str(location)
    head, sep, _ = text.partition("://")
    if not sep or not head.isalnum():
        return None
    return head.lower()


def implementation(location: object) -> type[Store]:
    """The store class that keeps what is at `location`: the folder store for a path or a
    `file://` URL, the backend store for any other URL (its scheme checked when opened)."""
    module, _, name = (FOLDER if scheme_of(location) in (None, "file") else BACKEND).partition(":")
    found: type[Store] = getattr(importlib.import_module(module), name)
    return found


class Store(Values):
    """A content-addressed store at `location`: a folder (made if missing; refused, with
    nothing made, where it cannot be: see `check_folder`), a `file://` URL, or a URL whose
    scheme a backend serves (`s3://bucket/prefix`). See the module docs of soma.store.

    Options (a backend takes them all and needs only `verify_existing`):
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

    # True on an implementation (FolderStore, BackendStore): `Store.__new__` makes it as asked
    IMPLEMENTATION: ClassVar[bool] = False

    def __new__(cls, location: Any = "", *args: object, **options: object) -> Store:
        """An instance of the implementation `location` needs (see `implementation`), whose
        `__init__` Python then calls with what `Store(...)` was given. Called on an
        implementation itself (`FolderStore(path)`, unpickling): that class, as asked."""
        if cls.IMPLEMENTATION:
            return super().__new__(cls)
        chosen = implementation(location)
        if cls is not Store:  # a subclass of Store itself: the same, on what `location` needs
            key = (cls, chosen)
            if key not in _JOINED:
                _JOINED[key] = type(cls.__name__, (cls, chosen), {"__module__": cls.__module__})
            chosen = _JOINED[key]
        return super().__new__(chosen)
