"""Broken variants of personal nodes and of what train() is told (registered into
tests/mutants.py's MUTANTS)."""

from __future__ import annotations

from mutants import _replace, mutant

_KEPT = ["tests/run/test_personal.py", "-k", "stay_with_each_client"]


@mutant("personal_never_loaded_back", caught_by=_KEPT)
def _personal_never_loaded_back() -> None:
    """A client's personal nodes start afresh every round: kept in the store, never read."""
    import soma.run.personal
    import soma.run.step

    original = soma.run.personal.load_round

    def load_round(nodes, weights, own, personal, fresh):
        original(nodes, weights, None, personal, fresh)

    _replace(soma.run.step, "load_round", load_round)


@mutant("personal_sent", caught_by=_KEPT)
def _personal_sent() -> None:
    """A client sends its personal nodes with the shared ones."""
    import soma.run.step

    _replace(soma.run.step, "shared", lambda exported, personal: exported)


@mutant("train_told_nothing", caught_by=_KEPT)
def _train_told_nothing() -> None:
    """A task's train() that takes `context=` is never told where it stands."""
    import soma.tasks.protocol

    _replace(soma.tasks.protocol, "takes_keyword", lambda function, name: False)


@mutant("task_not_found_in_the_working_folder", caught_by=[
    "tests/tasks/test_task_author.py", "-k", "working_folder"
])  # fmt: skip
def _task_not_found_in_the_working_folder() -> None:
    """`soma client --task mytask` looks only where the script's sys.path says."""
    import soma.tasks

    _replace(soma.tasks, "importable_here", lambda: None)


@mutant("a_client_that_never_trained_goes_unnamed", caught_by=[
    "tests/run/test_attendance.py", "-k", "never_trains_ends or only_a_client"
])  # fmt: skip
def _a_client_that_never_trained_goes_unnamed() -> None:
    """A client left out of every round ends the run in silence."""
    import soma.run.attendance

    _replace(soma.run.attendance, "never_trained", lambda records, among=None: {})
