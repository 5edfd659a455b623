"""Broken variants of issue 20's records and repair (registered into tests/mutants.py's
MUTANTS): inputs checked where they are used, claimed client records, holder checks at the
deadline, repair of every record kind."""

from __future__ import annotations

from mutants import _replace, mutant

_RECORDS = "tests/round/test_records.py"


@mutant("averager_trusts_values", caught_by=[_RECORDS, "-k", "nan or overlapping"])
def _averager_trusts_values() -> None:
    """The averager reads only the tensor files' headers' shapes, as before issue 20: a
    hand-written record's NaN is averaged, an overlap found after the claim."""
    import soma.round.checks

    def check_input(store, meeting, given, *, kept=None):
        return soma.round.checks.signature(store, given.weights)

    _replace(soma.round.checks, "check_input", check_input)


@mutant("finite_check_blind_to_numpy_floats", caught_by=[_RECORDS, "-k", "any_float_dtype"])
def _finite_check_blind_to_numpy_floats() -> None:
    """The finite check's numpy path says every float16/32/64 tensor is finite: a NaN or an
    infinity of those dtypes is averaged (bfloat16, checked by torch, would still be refused)."""
    import torch

    import soma.round.checks

    def _finite(tensor):
        return tensor.dtype in soma.round.checks._NUMPY_FLOATS or bool(torch.isfinite(tensor).all())

    _replace(soma.round.checks, "_finite", _finite)


@mutant("client_records_bound", caught_by=[_RECORDS, "-k", "second_contribution"])
def _client_records_bound() -> None:
    """A client's record is bound, not claimed, and nothing looks before: the last
    contribution wins, silently. (The look before the put, `_refuse_other_weights`, refuses a
    second contribution that comes after the first; the claim is what refuses one that
    raced it, which the store's contract suite races.)"""
    import soma.round.client

    def _claim_record(store, meeting, record):
        return store.keep(meeting.client(record.client), record.value())

    _replace(soma.round.client, "_claim_record", _claim_record)
    _replace(
        soma.round.client,
        "_refuse_other_weights",
        lambda store, meeting, mine, export, size, extra, own: None,
    )


@mutant("holder_checked_only_every_10s", caught_by=[_RECORDS, "-k", "holder_that_died"])
def _holder_checked_only_every_10s() -> None:
    """Whether a holder is gone is asked only every HOLDER_CHECK_EVERY seconds, never at the
    deadline: one that died since the last check is reported as one that may be alive."""
    import time

    import soma.round.once as once

    real, last = once._claim, {}

    def _claim(store, place, who, *, check_holder):
        now = time.monotonic()
        if check_holder and now - last.get(place.prefix, -1e9) < once.HOLDER_CHECK_EVERY:
            check_holder = False
        if check_holder:
            last[place.prefix] = now
        return real(store, place, who, check_holder=check_holder)

    _replace(once, "_claim", _claim)


@mutant("repair_leaves_garbled_names", caught_by=[_RECORDS, "-k", "garbled"])
def _repair_leaves_garbled_names() -> None:
    """Repair never works out what a garbled name file held."""
    import soma.health.repairing

    _replace(soma.health.repairing, "name_value", lambda store, graph, name: None)


@mutant("repair_ignores_the_tree", caught_by=[_RECORDS, "-k", "tree_rounds_identity"])
def _repair_ignores_the_tree() -> None:
    """Repair rebuilds a tree round's identity and average as if it were flat."""
    import soma.health.rebuild as rebuild

    _replace(rebuild, "_tree_and_secure", lambda average: {})
    _replace(rebuild, "_tree_of", lambda store, meeting, inputs: None)


@mutant("store_damage_drops_out", caught_by=[_RECORDS, "-k", "lost_strategy_state"])
def _store_damage_drops_out() -> None:
    """A client whose round's start or state is missing from the store drops out, and the
    drop-out stands after `soma repair`."""
    import soma.run.step

    _replace(soma.run.step, "store_fault", lambda store, error, meeting, client: None)


@mutant("secure_sum_trusted", caught_by=[_RECORDS, "-k", "secure_sum"])
def _secure_sum_trusted() -> None:
    """The secure round's averager trusts the published sum's record."""
    import soma.secagg.round

    _replace(soma.secagg.round, "check_sum", lambda store, meeting, sum_digest: None)


@mutant(
    "client_records_read_unchecked",
    caught_by=["tests/round/test_layout.py", "-k", "refused_naming"],
)
def _client_records_read_unchecked() -> None:
    """A client record is taken as it is: one without weights fails later, as a KeyError."""
    import soma.round.records

    def unchecked(value, *, client, name, digest=None):
        if "dropped" in value:
            return soma.round.records.DropRecord(client, value["dropped"], value.get("by"))
        return soma.round.records.ClientRecord(
            client, value["weights"], value["size"], value.get("extra"), value.get("own")
        )

    _replace(soma.round.records, "parse_client", unchecked)
