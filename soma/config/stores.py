"""The store a process that runs a round opens (`open_store`): with the run's durability,
its refusals naming the setting, and a folder it may not write refused at once. Pure of
torch until a store is opened (soma.store loads its folder store on first use)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from soma.errors import SomaError
from soma.files import DURABLE
from soma.store.errors import BadStore

if TYPE_CHECKING:
    from soma.store import Store


def open_store(
    path: str | Path, durability: str, named: str, refused: Callable[[str], SomaError]
) -> Store:
    """The store at `path` with `durability`, for a process that runs a round: its refusal
    (scratch on a store that says it is shared) as `refused`, naming the setting (`named`);
    a folder this process may not write refused now, in one line (`UnwritableStore`), not
    at its first write."""
    from soma.store import Store

    try:
        store = Store(path, durability=durability)
    except BadStore as error:
        if durability == DURABLE:
            raise
        raise refused(f"{named}: {error}") from None
    store.check_writable()  # a folder's folders now; a bucket's credentials at its first request
    return store
