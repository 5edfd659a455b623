"""Broken variants of what a model file says of its model (issue 37): registered into
tests/mutants.py."""

from __future__ import annotations

from mutants import _replace, mutant

_DESCRIBED = "tests/test_model_described.py"


@mutant("model_file_without_preprocessing", caught_by=[_DESCRIBED, "-k", "says_its_task"])
def _model_file_without_preprocessing() -> None:
    """The digits task says nothing of its inputs: a model file used outside soma is fed
    raw pixels and scores 0.87 where the run scored 0.95."""
    from soma.tasks.digits import DigitsTask

    _replace(DigitsTask, "preprocessing", lambda self: {})


@mutant("model_file_imports_the_stores_task", caught_by=[_DESCRIBED, "-k", "unless_vouched"])
def _model_file_imports_the_stores_task() -> None:
    """`soma export` imports whatever task the store names to describe it: reading a store
    runs code of its writer's choosing."""
    import soma.model

    real = soma.model.described

    def described(store, record, *, vouched=None):
        config = soma.model._meeting_config(store, record)
        return real(store, record, vouched=None if config is None else config["task"])

    _replace(soma.model, "described", described)


@mutant("model_file_trusts_any_about", caught_by=[_DESCRIBED, "-k", "not_its_meetings"])
def _model_file_trusts_any_about() -> None:
    """The task a model file names is read from whatever `about` record the store holds,
    unchecked against the meeting's key the average record names."""
    import soma.model
    from soma.round import layout

    def _meeting_config(store, record):
        name = layout.about(layout.meeting(record.run, record.round, record.meeting))
        config = store.recall_digest(store.resolve(name))["config"]
        return {**config, "options": config.get("options") or {}}

    _replace(soma.model, "_meeting_config", _meeting_config)
