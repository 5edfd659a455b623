# soma: a federated run as a Snakemake workflow. Each round is a set of rules: one `train`
# job per client, then one `average` job whose winner publishes the mean that round r+1
# starts from. See config/README.md for the options and README.md for what users type.
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from soma.config.configs import ConfigRefused, default_run, schema_refusal, typed
from soma.config.spec import RunSpec
from soma.config.study import study_of

min_version("8.0")


# The default configuration lives beside this file, so a run in another working directory
# (`snakemake -d DIR`) starts from it too; --configfile and --config override it.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


# Every value typed on --config read again from its text as the same text in a config file
# reads (Snakemake reads tracking=true as the text 'true', a study's seeds [0, 1] as texts),
# names as the very text typed (run=nan is 'nan', run=007 '007'): soma.config.configs. Not in
# a study's point (this file as a module), whose config Snakemake gives whole, made from the
# config read here. A run with no name is named after its task. The schema's refusal names
# the key and shows the value quoted with its type.
COMMAND_LINE = None
if not getattr(workflow.modifier, "skip_configfile", False):
    COMMAND_LINE = getattr(workflow.config_settings, "config_args", None)
config.update(typed(config, COMMAND_LINE))
config["run"] = default_run(config)
try:
    validate(config, "workflow/schemas/config.schema.yaml")
except WorkflowError as error:
    said = schema_refusal(error)
    if said is None:
        raise
    raise ConfigRefused(said) from None

# A study (soma.config.study): one run per point of its grid, every point's config checked as
# a run's is; the runs are made in this one DAG by workflow/rules/study.smk.
STUDY = study_of(config)
if STUDY is not None:

    include: "workflow/rules/study.smk"

    rule all:
        default_target: True
        input:
            rules.study_summary.output,
            STUDY_MODELS,

else:
    # What the schema cannot say and needs no torch, refused naming the config keys (the run
    # layer's one pure check, soma.config.spec): the task's option names (when its module declares
    # OPTIONS), a quorum the sample cannot meet, secure aggregation's threshold and what it
    # excludes. The rest (the task imports, its option values, its partition for this many
    # clients, the strategy fits, the metric) is checked by the `start` job, before any client
    # trains.
    RunSpec.from_config(config).check()

    # A deep chain of rounds recurses through Snakemake's DAG code about a frame per job.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 50 * config["rounds"] + 10_000))

    report: "workflow/report/workflow.rst"

    include: "workflow/rules/common.smk"
    include: "workflow/rules/rounds.smk"
    include: "workflow/rules/evaluation.smk"
    include: "workflow/rules/model.smk"

    rule all:
        default_target: True
        input:
            final_targets(),


# Under `--executor soma-slurm` (profiles/slurm) or `slurm`, every submission the run will
# make is checked against its partition (CPUs per node, memory, MaxTime, the account, then
# `sbatch --test-only`) before the first is made, and a refusal names the limit and the
# profile's key (soma.slurm).
onstart:
    from soma.slurm.submissions import EXECUTORS, check_or_exit

    if getattr(workflow.executor_plugin, "name", None) in EXECUTORS:
        check_or_exit(workflow)
