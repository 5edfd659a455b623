"""The round whose federated validation metric is best, as a model file (rule `best`)."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.best(sm.config, list(sm.input.evaluations), sm.output[0])
