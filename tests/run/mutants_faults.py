"""Broken variants of the rule that a store's fault is never a client's drop-out
(soma.run.step, soma.round.client); registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

_FAULTS = "tests/run/test_faults.py"


@mutant(
    "store_error_drops_out",
    caught_by=["tests/run/test_run_layer.py", "-k", "store_error_fails_the_client"],
)
def _store_error_drops_out() -> None:
    """As before issue 31: an error of the store while a client contributes is its drop-out
    (only a missing or corrupt blob is the store's), and a quorum averages without it."""
    import soma.run.step as step

    real = step.store_fault

    def store_fault(store, error, meeting, client):
        fault = real(store, error, meeting, client)
        return fault if isinstance(fault, step.StoreDamaged) else None

    _replace(step, "store_fault", store_fault)


@mutant(
    "fault_note_ignored",
    caught_by=["tests/round/test_client.py", "-k", "fault_note_stops_the_round"],
)
def _fault_note_ignored() -> None:
    """Peers never read a failed client's fault note: they wait out their deadline and then
    average around the broken store with their quorum."""
    import soma.round.client

    _replace(soma.round.client.Faults, "check", lambda self, missing: None)


@mutant(
    "folder_never_retries",
    # the first fails in-process (EIO is not retried), and -x ends the run there; the fault
    # trial (four clients' processes, a minute) catches it too
    caught_by=[
        "tests/store/test_patience.py::test_a_transient_error_is_retried_until_it_passes",
        f"{_FAULTS}::test_a_folder_failing_over_at_one_clients_claim_is_ridden_through_to_the_same_model",
    ],
)
def _folder_never_retries() -> None:
    """The folder store gives up at a file server's first hiccup (EIO, ESTALE): one failing
    over while a client claims its record fails the run."""
    import soma.store.folder.retries

    _replace(soma.store.folder.retries, "transient", lambda error: False)
