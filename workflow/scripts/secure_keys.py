"""A client's keys for its round's secure aggregation (rule `keys`)."""

from soma import workflow
from soma.workflow import secure as secure_jobs

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    secure_jobs.keys(
        sm.config,
        int(sm.wildcards.round),
        int(sm.wildcards.client),
        sm.input.previous,
        sm.output.receipt,
    )
