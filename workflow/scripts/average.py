"""The round's average, claimed so that exactly one job computes it (rule `average`)."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm.threads)
    workflow.average(
        sm.config,
        int(sm.wildcards.round),
        list(sm.input.clients),
        sm.input.previous,
        sm.output[0],
    )
