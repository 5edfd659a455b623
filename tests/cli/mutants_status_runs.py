"""Broken variants of `soma status` of every kind of run (issue 50 item 5), registered into
tests/mutants.py's MUTANTS: an asynchronous run's status replaying its versions again, a DP
run's status importing the tensor arithmetic, an asynchronous status that checks no
signature, and a round's status blind to distributed-DP releases. Each is caught by its own
tests only."""

from __future__ import annotations

from mutants import _replace, mutant

_FREE = "tests/cli/test_status_torch_free.py::"
_VERSIONS = "tests/asynchronous/test_status_versions.py::"
_RELEASE = "tests/round/test_report_release.py"


@mutant(
    "async_status_replays_its_versions",
    caught_by=[f"{_FREE}test_the_status_of_an_asynchronous_run_imports_no_torch"],
)
def _async_status_replays_its_versions() -> None:
    """`soma status` of an asynchronous run recomputes each version again (what it did before
    it read the records alone: soma.asynchronous.replay), importing torch and paying its
    seconds of CPU, and every weight of the run, for a look at where the run is."""
    import soma.asynchronous.status as status

    real = status._signatures

    def _signatures(store, signing, run, v, digest, record):
        import soma.asynchronous.replay  # noqa: F401 (the recomputation: torch)

        return real(store, signing, run, v, digest, record)

    _replace(status, "_signatures", _signatures)


@mutant(
    "dp_status_imports_the_tensor_arithmetic",
    caught_by=[f"{_FREE}test_the_status_of_a_dp_run_imports_no_torch"],
)
def _dp_status_imports_the_tensor_arithmetic() -> None:
    """Reading a DP round's privacy spent imports the tensor arithmetic (what a module-level
    `import torch` or `from soma.arithmetic import ...` in soma.privacy or the DP strategy's
    module would do): `soma status` of a DP run imports torch again."""
    import soma.round.report as report

    real = report.privacy_spent

    def privacy_spent(store, record, strategy=None, trusted=()):
        import soma.arithmetic  # noqa: F401 (imports torch)

        return real(store, record, strategy, trusted)

    _replace(report, "privacy_spent", privacy_spent)


@mutant(
    "async_status_checks_no_signature",
    caught_by=[f"{_VERSIONS}test_a_version_rewritten_unsigned_is_said_on_its_line_with_a_roster"],
)
def _async_status_checks_no_signature() -> None:
    """`soma status --roster` of an asynchronous run checks no signature now that it no
    longer replays: a version rewritten unsigned is shown as if it were the averager's."""
    import soma.asynchronous.status as status

    _replace(status, "_signatures", lambda store, signing, run, v, digest, record: [])


@mutant("status_knows_no_release", caught_by=[_RELEASE])
def _status_knows_no_release() -> None:
    """`soma status` does not read a meeting's distributed-DP releases: who released is not
    shown, a release whose record is on its way is not said, and a client record that is
    not its claimed release (a second noisy release) passes unsaid."""
    import soma.round.report as report

    _replace(report, "_releases", lambda store, prefix, clients: ({}, []))


@mutant(
    "status_loads_every_builtin",
    caught_by=[f"{_FREE}test_the_status_of_a_stateful_run_imports_no_torch"],
)
def _status_loads_every_builtin() -> None:
    """Every built-in strategy loaded to ask it the privacy spent, as before the reporters
    were named: a FedAdam run's status imports torch through the strategy."""
    import soma.strategies as strategies

    strategies.REPORTS_PRIVACY = frozenset(strategies.BUILTIN)
