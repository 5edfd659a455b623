"""How long the store rides through its own faults before it gives up: one policy for every
backend.

A shared folder or a bucket fails now and then for reasons nobody can fix from a client: an
S3 server restarting (SeaweedFS takes 17-25 s), a 503 SlowDown storm, an NFS handle gone
stale, a scratch quota momentarily full. A client that gives up at once would fail a round
that a few seconds' wait would have finished, and one that turned the fault into its own
drop-out would change the model (soma.run.step). So each backend retries its requests that
are safe to repeat (idempotent, or conditional: a claim, a compare-and-swap) with a doubling
backoff for up to `Patience.seconds`, and past that raises `StoreUnavailable`, naming the
store, the request and the last error: the client then fails, it does not drop out.

The default, `PATIENCE` = 120 s, rides through a server restart (25 s) four times over and
still fails a job within two minutes of a real outage, far inside any job's time limit.
`SOMA_STORE_PATIENCE` (seconds, in the environment every process of a run inherits: srun,
Snakemake's jobs, `soma client`) sets it for a run; `0` means no retry at all.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from soma.store.errors import BadStore, StoreUnavailable

T = TypeVar("T")
LOG = logging.getLogger("soma.store")

PATIENCE = 120.0  # seconds of retrying before a store error is raised (see the module)
ENVIRONMENT = "SOMA_STORE_PATIENCE"


@dataclass(frozen=True)
class Patience:
    """Retry for up to `seconds`, waiting `first`, then twice as long each time, at most `cap`."""

    seconds: float = PATIENCE
    first: float = 0.1
    cap: float = 5.0

    @classmethod
    def from_environment(cls) -> Patience:
        """`SOMA_STORE_PATIENCE` seconds, or the default; refused, naming the variable, when it
        is not a number >= 0."""
        text = os.environ.get(ENVIRONMENT, "").strip()
        if not text:
            return cls()
        try:
            seconds = float(text)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0 or seconds == float("inf"):
            raise BadStore(f"{ENVIRONMENT}={text!r} must be a number of seconds >= 0")
        return cls(seconds=seconds)

    def retrying(
        self,
        call: Callable[[], T],
        *,
        transient: Callable[[BaseException], bool],
        what: Callable[[], str],
        sleep: Callable[[float], None] = time.sleep,
        failed: tuple[float, Exception] | None = None,
    ) -> T:
        """`call()`, repeated while it raises what `transient` says may pass, for up to
        `seconds`; then StoreUnavailable naming `what()` and the last error. Anything else
        it raises goes through untouched. `failed`: (when it was started, what it raised),
        where the caller made the first attempt itself (a request that succeeds then pays
        no closure, no context and no clock of this one's)."""
        started, error = (time.monotonic(), None) if failed is None else failed
        delay, attempts = self.first, 0
        while True:
            if error is None:
                try:
                    return call()
                except Exception as raised:
                    error = raised
            if not transient(error):
                raise error
            attempts += 1
            spent = time.monotonic() - started
            if spent + delay > self.seconds:
                raise StoreUnavailable(
                    f"{what()} failed {attempts} time{'s' if attempts > 1 else ''} over "
                    f"{spent:.1f}s, the store's patience being {self.seconds:g}s "
                    f"({ENVIRONMENT}): {type(error).__name__}: {error}"
                ) from error
            LOG.warning("%s failed (%s: %s); retrying in %.1fs", what(), type(error).__name__,
                        error, delay)  # fmt: skip
            error = None
            sleep(delay)
            delay = min(delay * 2, self.cap)
