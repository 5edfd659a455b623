"""Broken variants of what readers trust (issue 32: readers verify, nothing named in the store
is imported); registered into tests/mutants.py's MUTANTS. Each keeps runs going: only the
reader's refusal it breaks can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_S = "tests/round/test_status_signed.py::"
_I = "tests/round/test_status_imports.py::"
_E = "tests/test_exported.py::"
_V = "tests/run/test_evaluation_signed.py::"


@mutant(
    "store_strategy_imported",
    caught_by=[_I + "test_status_shows_a_stored_strategy_by_name_and_imports_nothing"],
)
def _store_strategy_imported() -> None:
    """A strategy named by a record in the store is imported as a local config's is."""
    import soma.strategies as mod

    original = mod.load_strategy

    def load_strategy(name, options=None, *, trusted=True):
        return original(name, options, trusted=True)

    _replace(mod, "load_strategy", load_strategy)
    import soma.round.report as report

    report.load_strategy = load_strategy  # where status looks it up


@mutant(
    "reader_takes_any_average",
    caught_by=[
        _S + "test_a_fake_unsigned_round_is_labelled_and_nothing_it_says_is_shown",
        _E + "test_a_fake_last_round_is_refused_naming_it_and_no_file_is_written",
        _E + "test_the_model_job_writes_only_weights_a_signed_average_names",
    ],
)
def _reader_takes_any_average() -> None:
    """A reader takes an average record without checking its signature."""
    import soma.round.readers as mod

    def average_refusal(store, signing, run, round, key, digest):
        return None

    _replace(mod, "average_refusal", average_refusal)


@mutant(
    "reader_takes_any_record",
    caught_by=[
        _S + "test_a_forged_federated_evaluation_and_client_record_are_ignored",
        _E + "test_best_ignores_forged_federated_evaluations_naming_them",
    ],
)
def _reader_takes_any_record() -> None:
    """A reader takes a federated evaluation (or a client's record) unchecked; averages are
    still checked (the mutant above breaks those)."""
    import soma.round.readers as mod

    original = mod.refusal

    def refusal(store, signing, digest, *, name, writer, what):
        if "average record" in what:
            return original(store, signing, digest, name=name, writer=writer, what=what)
        return None

    _replace(mod, "refusal", refusal)


@mutant(
    "reader_never_told_of_a_roster",
    caught_by=[
        _S + "test_without_the_roster_a_signed_run_says_its_signatures_were_not_checked",
        _E + "test_soma_export_refuses_a_signed_run_without_its_roster_unless_told_unchecked",
    ],
)
def _reader_never_told_of_a_roster() -> None:
    """A run's meetings are never read for a roster: a signed run read without one is
    exported, and shown, as if it had none."""
    import soma.round.readers as mod

    def says_roster(store, run, found):
        return False

    _replace(mod, "says_roster", says_roster)


@mutant(
    "settle_takes_forged_evaluations",
    caught_by=[_V + "test_settling_refuses_a_forged_client_record_naming_it"],
)
def _settle_takes_forged_evaluations() -> None:
    """Whoever settles a round's federated record reads its clients' records unchecked."""
    import soma.run.evaluation as mod

    def _signed_record(store, meeting, name, k, what):
        digest = store.resolve(name)
        return None if digest is None else store.recall_digest(digest)

    _replace(mod, "_signed_record", _signed_record)


@mutant(
    "evaluation_records_unsigned",
    caught_by=[_V + "test_every_evaluation_record_is_signed_by_its_writer"],
)
def _evaluation_records_unsigned() -> None:
    """A client's training metrics are kept outside the record it signs (before issue 32 in
    a record of their own, unsigned): here, not in it at all."""
    import soma.run.step as step

    real = step.contribute

    def contribute(
        store, meeting, export, *, mine, size=None, extra=None, own=None, release=False,
        metrics=None,
    ):  # fmt: skip
        return real(
            store, meeting, export, mine=mine, size=size, extra=extra, own=own, release=release
        )

    _replace(step, "contribute", contribute)  # where a client's step looks it up
