# soma: a federated run as a Snakemake workflow. Each round is a set of rules: one `train`
# job per client, then one `average` job whose winner publishes the mean that round r+1
# starts from. See config/README.md for the options and README.md for what users type.
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from soma.configs import ConfigRefused, default_run, schema_refusal, typed
from soma.participation import ParticipationError, quorum_size, sample_size
from soma.tasks import check_option_names

min_version("8.0")


# The default configuration lives beside this file, so a run in another working directory
# (`snakemake -d DIR`) starts from it too; --configfile and --config override it.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


# Nested values given with --config arrive as text ("false", "3"), and run=2024 as a number:
# read them as the YAML the user typed, names as the very text typed (run=nan is 'nan', run=007
# '007'); a run with no name is named after its task. The schema's refusal names the key.
config.update(typed(config, getattr(workflow.config_settings, "config_args", None)))
config["run"] = default_run(config)
try:
    validate(config, "workflow/schemas/config.schema.yaml")
except WorkflowError as error:
    said = schema_refusal(error)
    if said is None:
        raise
    raise ConfigRefused(said) from None

# What the schema cannot say and needs no torch, refused naming the config keys: the task's
# option names (when its module declares OPTIONS), and a quorum the sample cannot meet. The
# rest (the task imports, its option values, its partition for this many clients, the
# metric) is checked by the `start` job, before any client trains.
check_option_names(config["task"], config["task_options"].get(config["task"]) or {})
try:
    quorum_size(
        config.get("quorum"),
        sample_size(config.get("participation"), config["clients"]),
    )
except ParticipationError as error:
    raise ParticipationError(
        f"config keys `clients`/`participation`/`quorum`: {error}"
    ) from None

# Secure aggregation's threshold must fit every round's sample, and its rounds are a job per
# client and phase (not batched, not a tree, yet).
secure = config.get("secure_aggregation")
if secure:
    sampled_count = sample_size(config.get("participation"), config["clients"])
    if not 2 <= secure["threshold"] <= sampled_count:
        raise ParticipationError(
            f"config key `secure_aggregation`: threshold {secure['threshold']} must be between "
            f"2 and the {sampled_count} clients of a round"
        )
    if config.get("clients_per_job", 1) != 1 or config.get("tree"):
        raise ParticipationError(
            "config keys `secure_aggregation`/`clients_per_job`/`tree`: a secure round is a "
            "job per client and phase, summed flat (clients_per_job 1, tree null)"
        )

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
