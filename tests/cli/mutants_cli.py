"""Broken variants of the command line's start (soma.cli), registered into tests/mutants.py's
MUTANTS: each breaks one guarantee, so that only its tests catch it."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant(
    "cli_takes_the_store_at_start",
    caught_by=["tests/cli/test_torch_free.py::test_a_commands_help_imports_no_torch"],
)
def _cli_takes_the_store_at_start() -> None:
    """Every command takes the store's tensor files before it parses its arguments (what a
    module-level `from soma.store import tensorfile` in soma/cli would do): `soma --help`
    imports torch, and pays its seconds of CPU."""
    import soma.cli as cli

    real = cli.parser  # the function main() calls (soma.cli.parser's, imported there)

    def parser():
        import soma.store.tensorfile  # noqa: F401 (imported with torch)

        return real()

    _replace(cli, "parser", parser)


@mutant(
    "status_loads_a_stateless_strategy",
    caught_by=["tests/cli/test_torch_free.py::test_the_status_of_a_run_imports_no_torch"],
)
def _status_loads_a_stateless_strategy() -> None:
    """`soma status` loads each round's strategy for its privacy spent even when its average
    names no state to read it from (FedAvg's): the strategy's module imports torch, and a
    status of a run pays its seconds of CPU."""
    import soma.round.report as report

    real = report.privacy_spent

    def privacy_spent(store, record, strategy=None, trusted=()):
        from soma.strategies import load_strategy

        name = record.get("strategy") or "fedavg"
        if strategy is None:
            strategy = load_strategy(name, record.get("options") or {}, trusted=name in trusted)
        return real(store, record, strategy, trusted)

    _replace(report, "privacy_spent", privacy_spent)
