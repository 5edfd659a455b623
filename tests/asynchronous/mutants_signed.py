"""Broken variants of a signed asynchronous run's guarantees (soma.asynchronous.signed): updates
signed by their clients, versions by the run's averagers, both checked by the audit and by the
client before it trains, a forged pending update refused, damage said per version and client.
Registered into tests/mutants.py's MUTANTS; caught by tests/asynchronous/test_signed.py."""

from __future__ import annotations

from mutants import _replace, mutant

_TESTS = "tests/asynchronous/test_signed.py"
_SIGNED = f"{_TESTS}::test_an_update_is_signed_by_its_client_and_a_version_by_an_averager"
_VERSION = (
    f"{_TESTS}::test_a_forged_version_fails_the_audit_and_the_client_refuses_to_train_from_it"
)
_UPDATE = f"{_TESTS}::test_a_forged_update_fails_the_audit_naming_its_version_and_client"
_DAMAGE = (
    f"{_TESTS}::test_a_corrupt_update_blob_is_said_per_version_and_client_with_advice_that_works"
)
_PENDING = f"{_TESTS}::test_a_pending_update_its_client_did_not_sign_is_refused_by_the_next_version"


@mutant("async_update_unsigned", caught_by=[_SIGNED])
def _async_update_unsigned() -> None:
    """A client's update kept as it is, unsigned, whatever the roster."""
    from soma.asynchronous import signed

    def put_update(store, signing, value, *, name):
        return store.put_value(dict(value))

    _replace(signed, "put_update", put_update)


@mutant("async_version_signer_unchecked", caught_by=[_VERSION])
def _async_version_signer_unchecked() -> None:
    """A version's record taken whoever signed it, or nobody: neither the audit nor the client
    that trains from it asks."""
    from soma.asynchronous import signed

    def check_signer(store, signing, run, v, digest):
        return 0

    _replace(signed, "check_signer", check_signer)


@mutant("async_version_any_member", caught_by=[_VERSION])
def _async_version_any_member() -> None:
    """A version's signature checked against the roster, not the averagers: a member outside
    them signs a version of its own."""
    from soma.asynchronous import signed
    from soma.round import signing as signatures

    def check_signer(store, signing, run, v, digest):
        what, name = signed.version_what(run, v), signed.version_name(run, v)
        return signatures.check(store, signing, digest, name=name, writer=None, what=what)

    _replace(signed, "check_signer", check_signer)


@mutant("async_consumed_update_unchecked", caught_by=[_UPDATE])
def _async_consumed_update_unchecked() -> None:
    """A version signed by an averager is believed whole: the updates it says it consumed are
    not checked against their clients' signatures."""
    from soma.asynchronous import signed

    def check_consumed(store, signing, run, v, entry):
        return None

    _replace(signed, "check_consumed", check_consumed)


@mutant("async_forged_update_consumed", caught_by=[_PENDING])
def _async_forged_update_consumed() -> None:
    """Whoever makes a version takes a pending update under a client's name without asking
    whether that client signed it."""
    from soma.asynchronous import signed

    def forged(store, signing, digest, *, name, client):
        return None

    _replace(signed, "forged", forged)


@mutant("async_damage_unplaced", caught_by=[_DAMAGE])
def _async_damage_unplaced() -> None:
    """A consumed update's blobs are not hashed one by one: a damaged one surfaces only when
    the version is recomputed, named by no client."""
    from soma.asynchronous import replay

    def sound(store, digest):
        return None

    _replace(replay, "sound", sound)
