"""Several clients' local training in one round, one after the other (rule `train_batch`)."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm)
    workflow.train_batch(
        sm.config,
        int(sm.wildcards.round),
        int(sm.wildcards.batch),
        list(sm.params.clients),
        sm.input.previous,
        sm.output[0],
        before=dict(sm.params.before),
    )
