"""The refusals of secure aggregation. Each names the client(s) it is about."""

from __future__ import annotations

from soma.errors import SomaError


class SecAggError(SomaError):
    """Secure aggregation cannot go on as asked."""


class MissingCryptography(SecAggError):
    """The `cryptography` package is not installed (`pip install 'soma[privacy]'`)."""


class NotEnoughShares(SecAggError):
    """Fewer Shamir shares than the threshold: the secret cannot be rebuilt."""

    def __init__(self, message: str, have: int, need: int) -> None:
        super().__init__(message)
        self.have, self.need = have, need


class InconsistentShares(SecAggError):
    """Shares that do not lie on one polynomial: one of them was changed or mixed up."""


class BadInput(SecAggError):
    """An export or size that cannot be summed securely (not finite, not a float, too large
    for the ring): refused before anything of it is written."""


class MaskedOnce(SecAggError):
    """This client's masking of the session was already claimed (by an earlier attempt): its
    masks are used once, so nothing masked is written again (no two-time pad)."""


class NotItsSecrets(SecAggError):
    """A client's secrets (read back from its folder, in the workflow) are not those whose
    public keys and commitment it published for the session: never used."""


class LeftOut(SecAggError):
    """This client came too late for a phase: the phase's roster (agreed by everyone) does not
    name it, so the round goes on without its export."""

    def __init__(self, message: str, client: int, phase: str) -> None:
        super().__init__(message)
        self.client, self.phase = client, phase


class BelowThreshold(SecAggError, TimeoutError):
    """Past the deadline, fewer clients than the threshold are there to go on with.

    `missing` are the clients awaited and never seen in that phase, `dropped` those that
    dropped out after sharing their keys (their masks are what cannot be removed), `have`
    and `need` the count against the threshold.
    """

    def __init__(
        self, message: str, *, missing: list[int], dropped: list[int], have: int, need: int
    ) -> None:
        super().__init__(message)
        self.missing, self.dropped, self.have, self.need = missing, dropped, have, need
