"""Values typed on the workflow's `--config` (soma.config.configs.typed): read again from the
text typed by the one option rule (soma.config.options.value), so that the config is the one
the same text in a config file gives; a refused value shown quoted with its type."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from soma.config import configs
from soma.config.configs import ConfigRefused, schema_refusal
from soma.config.identity import record
from soma.config.options import must_be, quoted, value
from soma.config.spec import RunSpec
from soma.config.study import study_of

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"


def base(tiny: Path = TINY) -> dict:
    """config/config.yaml under tests/fixtures/tiny.yaml, as `snakemake --configfile tiny.yaml`
    reads them (the Snakefile's `configfile:`, then the one given)."""
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config

    config = load_configfile(str(ROOT / "config" / "config.yaml"))
    update_config(config, load_configfile(str(tiny)))
    return config


def from_command_line(tiny: Path, *args: str) -> dict:
    """The config the Snakefile makes of `--configfile tiny --config ARGS`: Snakemake's own
    reading and merge of the arguments (its parse_config, update_config), then `typed`."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    config = base(tiny)
    update_config(config, parse_config(list(args)))
    return configs.typed(config, list(args))


def from_files(tmp_path: Path, tiny: Path, text: str) -> dict:
    """The config the Snakefile makes of `--configfile tiny FILE`, FILE holding `text`."""
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config

    extra = tmp_path / "extra.yaml"
    extra.write_text(text)
    config = base(tiny)
    update_config(config, load_configfile(str(extra)))
    return configs.typed(config, None)


# The spellings of README.md and config/README.md, each given on the command line and in a file.
SAME = {
    "tracking true": (["tracking=true"], "tracking: true\n"),
    "tracking yes": (["tracking=yes"], "tracking: yes\n"),
    "tracking True": (["tracking=True"], "tracking: True\n"),
    "a study": (
        ["study={strategy: [fedavg, fedadam], seed: [0, 1]}"],
        "study: {strategy: [fedavg, fedadam], seed: [0, 1]}\n",
    ),
    "nested task options": (
        ["task_options={soma.tasks.digits: {model: mlp, hidden: 0x10, scale: unit, lr: .5}}"],
        "task_options:\n  soma.tasks.digits: {model: mlp, hidden: 0x10, scale: unit, lr: .5}\n",
    ),
    "baselines off": (
        ['baselines={"alone": false, "centralized": no}'],
        "baselines: {alone: false, centralized: no}\n",
    ),
    "a participation, a null quorum": (
        ["participation=0.5", "quorum=null"],
        "participation: 0.5\nquorum: null\n",
    ),
    "a seed in octal": (["seed=010"], "seed: 010\n"),
    "a deadline": (["average_deadline=.inf"], "average_deadline: .inf\n"),
    "the last one wins": (["rounds=3", "rounds=4"], "rounds: 4\n"),
}


@pytest.mark.parametrize("case", sorted(SAME))
def test_a_value_typed_on_the_command_line_is_the_config_a_file_gives(tmp_path, case) -> None:
    args, text = SAME[case]
    typed = from_command_line(TINY, *args)
    assert typed == from_files(tmp_path, TINY, text)
    assert RunSpec.from_config(typed) == RunSpec.from_config(from_files(tmp_path, TINY, text))


def test_the_issues_values_are_accepted_and_typed() -> None:
    assert from_command_line(TINY, "tracking=true")["tracking"] is True
    study = from_command_line(TINY, "study={strategy: [fedavg, fedadam], seed: [0, 1]}")["study"]
    assert study == {"strategy": ["fedavg", "fedadam"], "seed": [0, 1]}
    found = study_of(from_command_line(TINY, "study={strategy: [fedavg, fedadam], seed: [0, 1]}"))
    assert found is not None and [p.config["seed"] for p in found.points] == [0, 1, 0, 1]


def test_a_nested_value_merges_into_the_files_keeping_its_other_keys() -> None:
    typed = from_command_line(TINY, "task_options={soma.tasks.digits: {model: mlp, hidden: 0x10}}")
    options = typed["task_options"]["soma.tasks.digits"]
    assert options["model"] == "mlp" and options["hidden"] == 16
    assert options["labels_per_client"] == 5 and options["epochs"] == 1  # tiny.yaml's, kept


def test_a_nested_option_typed_either_way_is_one_run(tmp_path) -> None:
    """`lr: 1e-1` is text in a file (YAML 1.1) and 0.1 on the command line, and 0x10 is 16 in
    both: the run's identity, what the workflow records, is the same."""
    args = ["task_options={soma.tasks.digits: {model: mlp, hidden: 0x10, lr: 1e-1}}"]
    text = "task_options:\n  soma.tasks.digits: {model: mlp, hidden: 0x10, lr: 1e-1}\n"
    typed, filed = from_command_line(TINY, *args), from_files(tmp_path, TINY, text)
    assert typed["task_options"]["soma.tasks.digits"]["lr"] == 0.1
    assert record(typed) == record(filed)
    assert RunSpec.from_config(typed).identity() == RunSpec.from_config(filed).identity()
    other = from_command_line(TINY, "task_options={soma.tasks.digits: {hidden: 0x11}}")
    assert record(other)["digest"] != record(filed)["digest"]


def test_a_config_files_values_are_not_read_again(tmp_path) -> None:
    """A value YAML read in a file is what the file says: quoted text stays text."""
    text = 'tracking: "true"\nbaselines: {alone: "no", centralized: false}\nrun: "007"\n'
    filed = from_files(tmp_path, TINY, text)
    assert filed["tracking"] == "true" and filed["baselines"]["alone"] == "no"
    assert filed["run"] == "007"


def test_a_name_is_the_very_text_typed() -> None:
    for typed, named in (("007", "007"), ("2024", "2024"), ("nan", "nan"), ("True", "True")):
        assert from_command_line(TINY, f"run={typed}")["run"] == named
    assert from_command_line(TINY, "run='x y'")["run"] == "x y"  # YAML's quotes, as in a file
    assert from_command_line(TINY, "run=null")["run"] is None  # no name: named after its task
    assert from_command_line(TINY, "run=")["run"] is None
    assert configs.typed({"run": 2024, "task": True}) == {"run": "2024", "task": "true"}


def test_a_config_read_again_is_a_new_mapping(tmp_path) -> None:
    given = {"task_options": {"t": {"a": 1}}, "rounds": 2}
    typed = configs.typed(given, ["task_options={t: {b: 2}}", "rounds=3"])
    assert typed == {"task_options": {"t": {"a": 1, "b": 2}}, "rounds": 3}
    assert given == {"task_options": {"t": {"a": 1}}, "rounds": 2}


def test_the_option_rule_reads_numbers_at_any_depth_and_keys_as_text() -> None:
    assert value("[1e-3, 2, .5, 0x10]") == [0.001, 2, 0.5, 16]
    assert value("{lr: 1E2, 1: a, yes: b, null: c}") == {
        "lr": 100.0,
        "1": "a",
        "yes": "b",
        "null": "c",
    }
    assert value("{a: {b: [on, off, ~]}}") == {"a": {"b": [True, False, None]}}
    assert value("inf") == "inf" and math.isinf(value(".inf")) and value("'3'") == "3"
    assert value("{a: [1") == "{a: [1"  # not YAML: the text


# --- a refused value: quoted, with its type --------------------------------------------------


def test_a_value_in_a_refusal_is_quoted_with_its_type() -> None:
    assert quoted("0") == "'0' (text)" and quoted(0) == "'0' (an integer)"
    assert quoted(True) == "'true' (a boolean)" and quoted(None) == "'null' (null)"
    assert quoted(0.5) == "'0.5' (a number)" and quoted(math.inf) == "'.inf' (a number)"
    assert quoted([0, "1"]) == "'[0, '1']' (a list)"
    assert quoted({"a": (1, 2)}) == "'{a: [1, 2]}' (a mapping)"
    said = must_be("config key `seed`", "an integer >= 0", "0")
    assert said == "config key `seed` must be an integer >= 0, not '0' (text)"


def test_a_seed_given_as_text_is_refused_quoted_with_its_type() -> None:
    config = from_command_line(TINY, "seed='0'")
    with pytest.raises(ConfigRefused) as refused:
        RunSpec.from_config(config).check()
    assert str(refused.value) == "config key `seed` must be an integer >= 0, not '0' (text)"
    study = from_command_line(TINY, "study={seed: ['0', 1]}")
    with pytest.raises(ConfigRefused) as refused:
        study_of(study)
    assert "config key `seed` must be an integer >= 0, not '0' (text)" in str(refused.value)


@pytest.mark.parametrize(
    "args, said",
    [
        (["tracking=1"], "config key `tracking`: '1' (an integer) is not of type 'boolean'"),
        (["tracking=inf"], "config key `tracking`: 'inf' (text) is not of type 'boolean'"),
        (["rounds=0"], "config key `rounds`: '0' (an integer) is less than the minimum of 1"),
        (["threads=2.5"], "config key `threads`: '2.5' (a number) is not of type 'integer'"),
    ],
)
def test_the_schemas_refusal_shows_the_value_quoted_with_its_type(args, said) -> None:
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    config = from_command_line(TINY, *args)
    with pytest.raises(WorkflowError) as error:
        validate(config, str(SCHEMA))
    found = schema_refusal(error.value)
    assert found is not None and found.startswith(said), found
