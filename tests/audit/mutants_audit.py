"""Broken variants of soma audit's checks (registered into tests/mutants.py's MUTANTS).

Each breaks one check of the audit alone (the runs it audits are untouched): only the
tampering that check exists for can catch it."""

from __future__ import annotations

from mutants import _replace, mutant

_T = "tests/audit/test_audit.py::"
_TAMPERED = _T + "test_tampering_fails_the_audit_naming_the_round"


@mutant(
    "audit_blobs_not_hashed", caught_by=[_TAMPERED + "[a flipped byte in a contribution's blob]"]
)
def _audit_blobs_not_hashed() -> None:
    """A contribution's record is read, its weights' tensor blobs are never hashed."""
    import soma.audit.rounds as mod

    _replace(mod, "value_blobs", lambda store, digest: [digest])


@mutant("audit_signatures_not_checked", caught_by=[_TAMPERED + "[an unsigned drop-out]"])
def _audit_signatures_not_checked() -> None:
    """The audit takes every record as signed by whom it must be."""
    import soma.audit.rounds as mod

    def _signed_by(store, meeting, digest, *, name, writer, what):
        return writer

    _replace(mod, "_signed_by", _signed_by)


@mutant(
    "audit_any_signer_drops_a_client",
    caught_by=[_TAMPERED + "[a drop-out signed by another client]"],
)
def _audit_any_signer_drops_a_client() -> None:
    """A drop-out signed by any roster member passes for its client's own."""
    import soma.audit.rounds as mod

    original = mod._signed_by

    def _signed_by(store, meeting, digest, *, name, writer, what):
        return original(store, meeting, digest, name=name, writer=None, what=what)

    _replace(mod, "_signed_by", _signed_by)


@mutant("audit_average_not_recomputed", caught_by=[_TAMPERED + "[a replaced average]"])
def _audit_average_not_recomputed() -> None:
    """An average signed by a roster member is taken as what its inputs make."""
    import soma.audit.rounds as mod

    def verify_average(store, meeting, digest, *, mode=None):
        return None

    _replace(mod, "verify_average", verify_average)


@mutant(
    "audit_removed_contribution_not_seen",
    caught_by=[_TAMPERED + "[a client record's name unbound]"],
)
def _audit_removed_contribution_not_seen() -> None:
    """An input whose client record is gone from the store is skipped, not reported."""
    import soma.audit.rounds as mod

    original = mod._contribution

    def _contribution(store, meeting, entry, k, audited):
        if store.resolve(meeting.client(k)) is not None:
            original(store, meeting, entry, k, audited)

    _replace(mod, "_contribution", _contribution)


@mutant(
    "audit_chain_not_checked",
    caught_by=[_T + "test_a_round_with_no_average_before_it_breaks_the_chain"],
)
def _audit_chain_not_checked() -> None:
    """Each round is audited alone: where it starts from is never compared."""
    import soma.audit.run as mod

    _replace(mod, "check_chain", lambda audits: None)


@mutant(
    "audit_sample_not_drawn",
    caught_by=[_T + "test_a_sample_the_public_seed_does_not_draw_is_broken"],
)
def _audit_sample_not_drawn() -> None:
    """Who a meeting expected is taken as it says, never drawn again from the seed."""
    import soma.audit.rounds as mod

    def _participation(meeting, audited):
        audited.add("participation", True, f"clients {meeting.members} expected")

    _replace(mod, "_participation", _participation)


@mutant(
    "audit_ledger_not_recomputed",
    caught_by=[_T + "test_a_dp_runs_epsilon_is_recomputed_and_a_lowered_one_is_named"],
)
def _audit_ledger_not_recomputed() -> None:
    """A DP run's epsilon is taken as its states report it."""
    import soma.audit.run as mod

    _replace(mod, "check_ledger", lambda store, audits, meetings: None)


_AVERAGERS = "tests/audit/test_averagers.py::"


@mutant(
    "reader_drops_averagers",
    caught_by=[
        _AVERAGERS + "test_a_run_that_declared_averagers_audits_clean_with_them",
        _AVERAGERS + "test_status_and_export_read_it_with_them",
    ],
)
def _reader_drops_averagers() -> None:
    """A reader (soma audit, status, export) builds its signing without the averagers it was
    given: a run that declared some reads as another roster's, every round unsigned."""
    import soma.round.signing as mod

    original = mod.for_reader

    def for_reader(store, run, roster, averagers=None):
        return original(store, run, roster, None)

    _replace(mod, "for_reader", for_reader)


_TRUNCATED = "tests/audit/test_truncated.py::"


@mutant(
    "audit_total_not_checked",
    caught_by=[
        _TRUNCATED + "test_every_name_of_the_last_round_forgotten_fails_against_the_rounds",
        _TRUNCATED + "test_rounds_other_than_given_fail",
    ],
)
def _audit_total_not_checked() -> None:
    """The rounds the reader gives (--rounds) are never compared with those the store holds:
    a run whose last rounds were deleted passes as a shorter one."""
    import soma.audit.run as mod
    from soma.audit.findings import Finding

    _replace(mod, "check_total", lambda audits, rounds: Finding("rounds", True, "not counted"))


@mutant(
    "audit_round_0_not_required",
    caught_by=[_TRUNCATED + "test_round_0_forgotten_fails_and_round_1_is_not_taken_as_the_first"],
)
def _audit_round_0_not_required() -> None:
    """A run whose round 0 is gone is not named so at the run's level."""
    import soma.audit.run as mod

    _replace(mod, "check_start", lambda audits: [])


@mutant(
    "audit_chain_starts_at_the_first_round_found",
    caught_by=[_TRUNCATED + "test_round_0_forgotten_fails_and_round_1_is_not_taken_as_the_first"],
)
def _audit_chain_starts_at_the_first_round_found() -> None:
    """The chain takes the first round the store holds as the run's first: with round 0
    deleted, round 1 starts the run from nothing."""
    import soma.audit.across as mod

    _replace(mod, "first_round", lambda averaged: min(averaged))


@mutant(
    "audit_never_came_taken_as_said",
    caught_by=[
        _TRUNCATED + "test_never_came_while_its_record_is_bound_in_a_round_that_needed_it_fails",
        _TRUNCATED + "test_never_came_under_a_quorum_fails_only_where_the_signed_times_order_it",
    ],
)
def _audit_never_came_taken_as_said() -> None:
    """A client the average says never came is taken at its word, whatever of it is bound."""
    import soma.audit.rounds as mod

    def _absent(store, meeting, k, why, audited):
        audited.add("left-out", True, f"client {k} {why}", k)

    _replace(mod, "_absent", _absent)


@mutant(
    "audit_quorum_not_checked",
    caught_by=[_TRUNCATED + "test_an_average_below_its_quorum_fails"],
)
def _audit_quorum_not_checked() -> None:
    """An average of fewer inputs than its round's quorum passes."""
    import soma.audit.rounds as mod

    _replace(mod, "_quorum", lambda meeting, audited: None)


@mutant(
    "audit_signed_times_not_ordered",
    caught_by=[
        _TRUNCATED + "test_never_came_under_a_quorum_fails_only_where_the_signed_times_order_it"
    ],
)
def _audit_signed_times_not_ordered() -> None:
    """Under a quorum, a record its client signed as written an hour before the others' is
    taken as a late client's."""
    import soma.audit.rounds as mod

    _replace(mod, "_came_before", lambda store, meeting, found, audited: None)


@mutant(
    "audit_unchecked_not_listed",
    caught_by=[
        _TRUNCATED + "test_a_clean_run_holds_against_its_rounds_and_says_what_it_could_not_check"
    ],
)
def _audit_unchecked_not_listed() -> None:
    """The verdict counts the checks that could not be made and never says which, or why."""
    import soma.audit.text as mod

    _replace(mod, "_unchecked", lambda report: [])


_PROVENANCE = "tests/audit/test_provenance.py::"


@mutant(
    "audit_prov_verdict_left_out",
    caught_by=[
        _PROVENANCE
        + "test_a_clean_audits_provenance_says_clean_naming_the_roster_charter_and_model",
        _PROVENANCE + "test_a_failed_audit_writes_provenance_and_a_crate_saying_failed",
    ],
)
def _audit_prov_verdict_left_out() -> None:
    """The PROV-JSON document names the audit and its report, never the verdict, the failed
    checks or those not made: a failed audit's provenance reads like a clean one's."""
    import soma.audit.prov as mod

    _replace(mod, "_verdict", lambda doc, report, audit, entity: None)
