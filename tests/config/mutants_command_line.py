"""Broken variants of reading values typed on the workflow's `--config`
(soma.config.configs.typed), registered into tests/mutants.py's MUTANTS."""

from __future__ import annotations

from mutants import _replace, mutant


@mutant(
    "command_line_not_read_again",
    caught_by=[
        "tests/config/test_config_values.py",
        "tests/workflow/test_config_command_line.py::"
        "test_a_value_typed_on_the_command_line_runs_the_config_a_file_gives[tracking]",
    ],
)
def _command_line_not_read_again() -> None:
    """Values typed on `--config` kept as Snakemake read them (`tracking=true` the text
    'true', a study's seeds texts); only names keep the text typed."""
    import soma.config.configs as configs

    typed = configs.typed

    def not_read_again(config, command_line=None):
        names = [a for a in command_line or () if str(a).partition("=")[0] in configs.TEXT_KEYS]
        return typed(config, names)

    _replace(configs, "typed", not_read_again)
