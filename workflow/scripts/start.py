"""The run's starting weights, from the seed, and the record of what the run is (rule `start`)."""

from soma import workflow

with workflow.logged(snakemake.log[0]):  # noqa: F821
    workflow.threads(snakemake)  # noqa: F821
    workflow.start(snakemake.config, snakemake.output[0], snakemake.output.run)  # noqa: F821
