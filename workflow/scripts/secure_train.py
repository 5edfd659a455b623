"""A client's training, sent as a masked input only (rule `train` under secure aggregation)."""

from soma import workflow
from soma.workflow import secure as secure_jobs

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm)
    secure_jobs.train(
        sm.config,
        int(sm.wildcards.round),
        int(sm.wildcards.client),
        sm.input.previous,
        sm.output[0],
    )
