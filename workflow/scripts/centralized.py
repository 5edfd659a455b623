"""Baseline: all the training data in one place (rule `centralized`)."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm)
    workflow.centralized(sm.config, sm.input[0], sm.output[0])
