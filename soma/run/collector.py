"""A run's rounds with the heap made before them out of the cyclic collector's sight.

Why: a process that hosts clients holds a large heap made before its first round (torch's
modules, the task's data and every hosted client's shard: ~10^5-10^6 objects), which none of
the rounds frees. Each full collection of Python's cyclic garbage collector walks all of it:
~90 ms at 1,000 clients of the control task, a sixth of a round's averaging (issue 34).
Frozen (`gc.freeze`), a collection walks only what the rounds make. Unfrozen at the end, so
that the caller's objects are collectable again as they were before the run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """Inside, every object made before is left alone by the cyclic collector."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
