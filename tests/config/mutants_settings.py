"""Broken variants of the run settings' one declaration (soma.config.settings) and of threads
as part of the run; registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

SETTINGS_TESTS = "tests/config/test_settings.py"


@mutant(
    "threads_left_out_of_the_meeting",
    caught_by=[f"{SETTINGS_TESTS}::test_a_setting_that_changes_the_run_changes_its_meeting"],
)
def _threads_left_out_of_the_meeting() -> None:
    """Threads not in the run's identity: clients on other thread counts meet as one run."""
    from soma.config.spec import RunSpec

    identity = RunSpec.identity

    def without_threads(self):
        found = identity(self)
        found.pop("threads", None)
        return found

    _replace(RunSpec, "identity", without_threads)


@mutant(
    "threads_left_out_of_the_declared_record",
    caught_by=[SETTINGS_TESTS],
)
def _threads_left_out_of_the_declared_record() -> None:
    """The workflow's run.json without threads: a rerun on other threads goes on."""
    import soma.config.identity as identity

    declared = identity.declared

    def without_threads(config):
        found = declared(config)
        found.pop("threads", None)
        return found

    _replace(identity, "declared", without_threads)


@mutant(
    "clients_train_on_the_process_s_threads",
    caught_by=[
        f"{SETTINGS_TESTS}::test_clients_train_on_the_run_s_threads_whatever_the_process_has"
    ],
)
def _clients_train_on_the_process_s_threads() -> None:
    """Training on whatever threads the process has, not the run's."""
    import contextlib

    import soma.run.step as step

    _replace(step, "training_threads", lambda count: contextlib.nullcontext())


@mutant(
    "a_setting_left_off_the_command_line",
    caught_by=[
        f"{SETTINGS_TESTS}::test_each_option_is_on_the_command_line_and_each_option_a_setting"
    ],
)
def _a_setting_left_off_the_command_line() -> None:
    """One declared setting (threads) not built into the run options."""
    import sys

    import soma.cli.parser  # noqa: F401 (soma.cli's `parser` is the function of that name)
    import soma.config.settings as settings

    module = sys.modules["soma.cli.parser"]

    def without_threads(parser):
        for setting in settings.SETTINGS:
            if setting.option is None or not setting.flag or setting.field == "threads":
                continue
            flag = dict(setting.flag)
            if callable(flag.get("default")):
                flag["default"] = flag["default"]()
            parser.add_argument(setting.option, **flag)

    _replace(module, "add_run_options", without_threads)


@mutant("a_name_no_module_has_goes_on", caught_by=["tests/config/test_lookup.py"])
def _a_name_no_module_has_goes_on() -> None:
    """A task or strategy that names no module passes the check: met minutes later, at its
    import, at the end of a traceback."""
    import soma.config.lookup as lookup

    _replace(lookup, "missing", lambda path: False)
