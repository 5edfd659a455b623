"""The per-round table and the accuracy plot (rule `summary`)."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    metric = sm.config["metric"]
    rows = workflow.summary_rows(
        sm.input.evaluations,
        sm.input.alone,
        (sm.input.centralized or [None])[0],
        metric,
        sm.config["strategy"],
    )
    workflow.summary(rows, metric, sm.output.table, sm.output.plot)
