# soma: a federated run as a Snakemake workflow. Each round is a set of rules: one `train`
# job per client, then one `average` job whose winner publishes the mean that round r+1
# starts from. See config/README.md for the options and README.md for what users type.
import os
import sys

from snakemake.utils import min_version, validate

min_version("8.0")


# The default configuration lives beside this file, so a run in another working directory
# (`snakemake -d DIR`) starts from it too; --configfile and --config override it.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


validate(config, "workflow/schemas/config.schema.yaml")

# A deep chain of rounds recurses through Snakemake's DAG code about a frame per job.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 50 * config["rounds"] + 10_000))


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/rounds.smk"
include: "workflow/rules/evaluation.smk"


rule all:
    default_target: True
    input:
        final_targets(),
