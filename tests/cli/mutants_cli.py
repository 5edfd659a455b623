"""Broken variants of the command line's start (soma.cli), registered into tests/mutants.py's
MUTANTS: each breaks one guarantee, so that only its tests catch it."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant("cli_takes_the_store_at_start", caught_by=["tests/cli/test_torch_free.py"])
def _cli_takes_the_store_at_start() -> None:
    """Every command takes the store's class before it parses its arguments (what a
    module-level `from soma.store import Store` in soma/cli would do): `soma --help` imports
    torch, and pays its seconds of CPU."""
    import soma.cli as cli

    real = cli.parser  # the function main() calls (soma.cli.parser's, imported there)

    def parser():
        import soma.store

        soma.store.Store  # noqa: B018 (the class, imported with its tensor modules)
        return real()

    _replace(cli, "parser", parser)
