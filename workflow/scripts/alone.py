"""Baseline: one client trained alone for as long as the federation (rule `alone`)."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm)
    workflow.alone(sm.config, int(sm.wildcards.client), sm.input[0], sm.output[0])
