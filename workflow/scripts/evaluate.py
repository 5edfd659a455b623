"""The round's average on the held-out test set, and on each evaluating client's own
held-out data (rule `evaluate`)."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm)
    workflow.evaluate(
        sm.config,
        int(sm.wildcards.round),
        sm.input.average,
        sm.output[0],
        previous=sm.input.previous,
    )
