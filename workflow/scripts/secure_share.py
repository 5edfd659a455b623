"""A client's secrets shared among its round's clients (rule `share`)."""

from soma import workflow
from soma.workflow import secure as secure_jobs

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    secure_jobs.share(
        sm.config,
        int(sm.wildcards.round),
        int(sm.wildcards.client),
        sm.input.previous,
        sm.output.receipt,
    )
