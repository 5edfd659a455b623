"""Broken variants of a client's training metrics kept in the record it signs (issue 50;
registered into tests/mutants.py's MUTANTS): the signature not covering them, and the
round's training figures read without checking whose record they come from."""

from __future__ import annotations

from mutants import _replace, mutant

_SIGNED = "tests/run/test_evaluation_signed.py"
_READ = _SIGNED + "::test_training_metrics_are_read_only_from_their_own_client_s_signed_record"
_UNSIGNED = (
    "tests/run/test_evaluation_training.py"
    "::test_a_record_said_to_be_another_client_s_is_refused_naming_both"
)


@mutant("training_metrics_outside_the_signature", caught_by=[_READ])
def _training_metrics_outside_the_signature() -> None:
    """A record's metrics are left out of what its signature covers (signing and checking
    alike, so every record still verifies): metrics changed after signing go unnoticed."""
    import soma.round.signing as mod

    real = mod._message

    def _message(name, tree, loose, run):
        if isinstance(tree, dict):
            tree = {k: v for k, v in tree.items() if k != "metrics"}
        return real(name, tree, loose, run)

    _replace(mod, "_message", _message)


@mutant("training_metrics_of_any_client", caught_by=[_READ, _UNSIGNED])
def _training_metrics_of_any_client() -> None:
    """The round's training figures are read from whatever record an input entry names,
    signed by anyone on the roster and said to be anyone's: another client's metrics count."""
    import soma.run.evaluation as mod
    from soma.round.records import parse_client
    from soma.round.signed import check_signed

    def training_of(store, meeting, inputs):
        found = []
        for entry in inputs:
            k, digest = entry["client"], entry["record"]
            check_signed(store, meeting, digest, name=meeting.client(k), writer=None, what="x")
            value = store.recall_digest(digest)
            record = parse_client(value, client=value["client"], name=meeting.client(k))
            found.append({"client": k, "metrics": dict(record.metrics), "size": record.size})
        return found

    _replace(mod, "training_of", training_of)


@mutant("training_metrics_unchecked", caught_by=[_READ])
def _training_metrics_unchecked() -> None:
    """The round's training figures are read from the client's record without checking its
    signature: a record forged after the fact reaches the round's `federated`."""
    import soma.run.evaluation as mod
    from soma.round.records import read_client

    def training_of(store, meeting, inputs):
        found = []
        for entry in inputs:
            k = entry["client"]
            record = read_client(store, entry["record"], client=k, name=meeting.client(k))
            found.append({"client": k, "metrics": dict(record.metrics), "size": record.size})
        return found

    _replace(mod, "training_of", training_of)
