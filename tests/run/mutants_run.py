"""Broken variants of the run layer (soma.run: options, identity, the deep check, the client
step); registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

# --- the run layer (soma/run/) ---------------------------------------------------------------


@mutant(
    "options_read_an_exponent_as_text",
    caught_by=["tests/run/test_run_layer.py", "-k", "reads_as_yaml"],
)
def _options_read_an_exponent_as_text() -> None:
    """YAML 1.1 alone: `1e-1` stays the text '1e-1' (what the workflow used to read)."""
    import soma.config.options

    def value(text):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text

    _replace(soma.config.options, "value", value)


@mutant(
    "identity_digests_raw_option_text",
    caught_by=["tests/run/test_run_layer.py", "-k", "typed_two_ways"],
)
def _identity_digests_raw_option_text() -> None:
    """A run's declared options as typed: `lr: 1e-1` and `lr: 0.1` become two runs."""
    import soma.config.identity

    real = soma.config.identity.declared

    def declared(config):
        what = real(config)
        task, strategy = config["task"], config.get("strategy", "fedavg")
        what["task_options"] = (config.get("task_options") or {}).get(task) or {}
        what["strategy_options"] = (config.get("strategy_options") or {}).get(strategy) or {}
        return what

    _replace(soma.config.identity, "declared", declared)


@mutant(
    "spec_checks_no_tree",
    caught_by=["tests/run/test_run_layer.py", "-k", "tree_with_a_strategy"],
)
def _spec_checks_no_tree() -> None:
    """The deep check forgets the tree: a client trains round 0 before the averaging refuses."""
    import dataclasses

    import soma.run.checked

    real = soma.run.checked.checked

    def checked(spec):
        return real(dataclasses.replace(spec, tree=None))

    _replace(soma.run.checked, "checked", checked)


@mutant(
    "a_client_leaves_a_round_that_needs_it_silently",
    caught_by=["tests/run/test_run_layer.py", "-k", "leaves"],
)
def _a_client_leaves_a_round_that_needs_it_silently() -> None:
    """A client that cannot take part drops out even when the round cannot go on without it."""
    import soma.run.step
    from soma.round import drop

    def leave(store, meeting, client, why):
        drop(store, meeting, mine=client, why=why)
        return soma.run.step.Outcome(client, dropped=why)

    _replace(soma.run.step, "leave", leave)
