"""Broken variants of what a dry run refuses at parse time (an unwritable store, a task
option of a type its task declares otherwise); registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant

PARSE_TESTS = "tests/config/test_parse_time.py"


@mutant(
    "an_unwritable_store_passes_the_parse",
    caught_by=[f"{PARSE_TESTS}::test_the_snakefiles_config_reader_refuses_an_unwritable_store"],
)
def _an_unwritable_store_passes_the_parse() -> None:
    """Every store folder taken as writable: the `start` job finds out, a minute later."""
    import soma.config.stores as stores

    _replace(stores, "unwritable_folder", lambda path: None)


@mutant(
    "task_option_types_unchecked",
    caught_by=[
        f"{PARSE_TESTS}::test_a_task_option_of_the_wrong_type_is_refused_naming_the_key",
    ],
)
def _task_option_types_unchecked() -> None:
    """A task option of any type taken at parse time: `epochs: two` reaches the `start` job."""
    import soma.config.task_options as task_options

    _replace(task_options, "type_refusal", lambda task, options: None)
