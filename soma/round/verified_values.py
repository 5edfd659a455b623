"""What one averaging already read and verified, kept for the arithmetic that follows it.

Before anything is claimed every process reads each input's weights (and extra), verifies
their bytes against their digest and checks every value finite (soma.round.checks
`check_input`); the averaging then folds the very values that were checked instead of
reading and verifying them a second time (issue 34: at 1,000 clients the second read was a
third of the averaging). A value is kept under the digest its bytes were verified against,
and handed back only for that digest: an input whose record names other weights is read
from the store, verified, like any other. Kept up to a budget of bytes: past it (a big
model's inputs) an input is read again when it is folded, so the averaging's memory stays
that of one input at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from soma.store import Store
from soma.strategies import Update

if TYPE_CHECKING:
    from soma.round.meeting import Input

BUDGET = 64 * 2**20  # bytes of checked values kept between the check and the fold


def _nbytes(value: Any) -> int:
    """The bytes of an export's tensors (a map of nodes, each a map of tensors)."""
    total = 0
    for tensors in value.values():
        for t in tensors.values():
            total += t.numel() * t.element_size()
    return total


class VerifiedValues:
    """Checked values of one averaging, by the digest they were verified against."""

    def __init__(self, budget: int = BUDGET) -> None:
        self._values: dict[str, tuple[Any, int]] = {}
        self._left = budget

    def keep(self, digest: str, value: Any) -> None:
        """Keep `value`, read from the store as blob `digest` and verified, if it fits."""
        if digest in self._values:
            return
        size = _nbytes(value)
        if size <= self._left:
            self._values[digest] = (value, size)
            self._left -= size

    def recall(self, store: Store, digest: str) -> Any:
        """The value of `digest`: the one kept for it (once), or read and verified now."""
        found = self._values.pop(digest, None)
        if found is None:
            return store.recall_digest(digest, lazy=True)
        self._left += found[1]
        return found[0]

    def update(self, store: Store, given: Input) -> Update:
        """A client's update as a strategy takes it (`Input.update`), from what was kept."""
        return Update(
            client=given.client,
            size=given.size,
            weights=self.recall(store, given.weights),
            extra=None if given.extra is None else self.recall(store, given.extra),
        )
