"""A client's revealed shares, that unmask its round's sum (rule `reveal`)."""

from soma import workflow
from soma.workflow import secure as secure_jobs

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    secure_jobs.reveal(
        sm.config,
        int(sm.wildcards.round),
        int(sm.wildcards.client),
        sm.input.previous,
        sm.input.trained,
        sm.output[0],
    )
