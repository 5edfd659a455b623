"""Broken variants of leases on a bucket (soma.round.lease; registered into tests/mutants.py's
MUTANTS): each keeps claims, renewals and publishing working, so that only the lease's
guarantee can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_LEASE = "tests/round/test_lease_s3.py"
# the same rule in one process, on a bucket's names in memory, first (-x stops there); the
# processes on the S3 server after it (a run of its own starts the server: ~10 s)
_WATCH = "tests/round/test_lease_watch.py"


@mutant(
    "lease_renewed_by_unconditional_put",
    caught_by=[_WATCH, _LEASE, "-k", "successor_took or stopped"],
)
def _lease_renewed_by_unconditional_put() -> None:
    """A renewal that PUTs the lease whatever it holds: a holder that wakes after its lease
    ran out takes it back from its successor, and publishes over it."""
    import soma.round.lease as lease

    def renew(self) -> bool:
        with self._lock:
            renewed = lease.Terms(**{**self.terms.value(), "renewals": self.terms.renewals + 1})
            name = lease.layout.lease(self.place)
            digest = self.store.put_value(renewed.value())
            self.store.bind(name, digest)
            self.terms, self.tag = renewed, self.store.resolve_tagged(name)[1]
            return True

    _replace(lease.Lease, "renew", renew)


@mutant(
    "lease_expires_without_waiting", caught_by=[_WATCH, _LEASE, "-k", "dead_holder or renewing"]
)
def _lease_expires_without_waiting() -> None:
    """A holder judged gone as soon as a lease is looked at: a live holder is taken over."""
    import soma.round.lease as lease

    real = lease.Watch.gone

    def gone(self, place: str, name: str, digest: str) -> bool:
        real(self, place, name, digest)
        return self.published is None

    _replace(lease.Watch, "gone", gone)


@mutant(
    "lease_publish_unconditional", caught_by=[_WATCH, _LEASE, "-k", "successor_took or stopped"]
)
def _lease_publish_unconditional() -> None:
    """A holder that publishes without swapping its lease to the published state: a late
    holder publishes over its successor."""
    import soma.round.lease as lease

    def finish(self, digest: str) -> bool:
        self.stop()
        return True

    _replace(lease.Lease, "finish", finish)
