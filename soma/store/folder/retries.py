"""Which failures of a folder store pass if a request is made again, and the wrapper that
makes the folder store's requests again within its patience (soma.store.patience).

Why a module of its own: the folder store (soma.store.folder) wraps every request it
offers in this, and its claim asks `transient` too; what counts as transient is one
decision, kept here apart from how the folder reads and writes."""

from __future__ import annotations

import errno
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from soma.store.errors import StoreError
from soma.store.folder import unwritable

if TYPE_CHECKING:
    from soma.store.folder.store import FolderStore

# What a file system says while it recovers (an NFS server restarting or failing over, a
# handle gone stale, a lock or a device busy): retried within the store's patience
# (soma.store.patience). A full disk or quota (ENOSPC, EDQUOT) is not: it is an operator's to
# free, and a client that met it fails at once, naming the store; nor is anything that says
# what is there (ENOENT, EEXIST) or what may not be done (EACCES, EROFS).
TRANSIENT_ERRNOS = frozenset(
    {errno.ESTALE, errno.EIO, errno.EAGAIN, errno.ETIMEDOUT, errno.EBUSY, errno.ENOLCK}
)

F = TypeVar("F", bound=Callable[..., Any])


def transient(error: BaseException) -> bool:
    """Whether the folder's `error` may pass if the request is made again."""
    return (
        isinstance(error, OSError)
        and not isinstance(error, StoreError)
        and error.errno in TRANSIENT_ERRNOS
    )


def patiently(method: F) -> F:
    """`method`, retried within the store's patience while the folder fails transiently: every
    operation wrapped so is idempotent (a put of bytes already there, a bind of the same
    digest, a read), so doing it again is safe whatever the failed attempt left. The first
    attempt is made bare (no context, closure or clock: ~4 us a request, ~5 requests a
    contribution); whatever it raises of OSError is judged as the retries' would be."""

    @functools.wraps(method)
    def retried(self: FolderStore, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return method(self, *args, **kwargs)
        except OSError as error:
            failed = (started, error)

        def what() -> str:  # only when it failed: nothing spelled on the way through
            shown = ", ".join(repr(a)[:80] for a in args if not isinstance(a, bytes | memoryview))
            return f"{method.__name__}({shown}) in {self!r}"

        with unwritable.refusing(self.directory):
            return self.patience.retrying(
                lambda: method(self, *args, **kwargs), transient=transient, what=what,
                failed=failed,
            )  # fmt: skip

    return retried  # type: ignore[return-value]
