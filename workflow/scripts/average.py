"""The round's average, claimed so that exactly one job computes it (rule `average`)."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm)
    if sm.config["secure_aggregation"]:  # the inputs are the clients' revealed shares
        from soma.workflow import secure as secure_jobs

        secure_jobs.average(
            sm.config, int(sm.wildcards.round), sm.input.previous, list(sm.input.clients),
            sm.output[0],
        )  # fmt: skip
    else:
        workflow.average(
            sm.config,
            int(sm.wildcards.round),
            list(sm.input.clients),
            sm.input.previous,
            sm.output[0],
        )
