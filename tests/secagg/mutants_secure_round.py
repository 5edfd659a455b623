"""Broken variants of a secure round in a run (soma.secagg.round); registered into
tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

# --- secure rounds (soma/secagg/round.py) ---


@mutant(
    "secure_round_keeps_the_export_in_the_clear",
    caught_by=["tests/secagg/test_secure_round.py", "-k", "correlates"],
)
def _secure_round_keeps_the_export_in_the_clear() -> None:
    """A secure round that also keeps each trained export in the store, as a plain round does."""
    import soma.secagg.round
    from soma.round.once import POLL

    real = soma.secagg.round.take_part

    def leaky(store, meeting, clients, train, *, deadline, backoff=POLL):
        def leak(k):
            trained = train(k)
            if not isinstance(trained, str):
                store.put_value(trained[0])
            return trained

        return real(store, meeting, clients, leak, deadline=deadline, backoff=backoff)

    _replace(soma.secagg.round, "take_part", leaky)


@mutant(
    "unmasking_forgets_the_lease",
    caught_by=["tests/secagg/test_secure_round.py", "-k", "configured_lease"],
)
def _unmasking_forgets_the_lease() -> None:
    """A secure round's unmasking claims with the default lease, whatever the run was given
    (what it did before the lease travelled on RunSpec.timing)."""
    import soma.secagg
    from soma.round.once import POLL
    from soma.timing import LEASE

    real = soma.secagg.unmask

    def forgetful(store, session, *, deadline, backoff=POLL, lease):
        return real(store, session, deadline=deadline, backoff=backoff, lease=LEASE)

    _replace(soma.secagg, "unmask", forgetful)


@mutant(
    "secure_record_says_which_process_wrote_it",
    caught_by=[
        "tests/round/test_layout.py::"
        "test_client_and_drop_out_records_hold_exactly_the_keys_they_always_did"
    ],
)
def _secure_record_says_which_process_wrote_it() -> None:
    """The secure client record carries its writer (host and pid), as `soma client`'s did
    before one schema: the same round's records then differ by mode and by process."""
    import soma.round.records as records
    from soma.round import holders

    def value(self):
        return {"client": self.client, "secure": self.secure, "by": holders.me()}

    _replace(records.SecureRecord, "value", value)
