"""One client's local training in one round (rule `train`)."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm)
    workflow.train(
        sm.config,
        int(sm.wildcards.round),
        int(sm.wildcards.client),
        sm.input.previous,
        sm.output[0],
        before=sm.input.get("before"),
    )
