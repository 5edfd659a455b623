"""The per-round table (TSV and HTML), with what each round cost, and the metric's plot,
against rounds and against cost (rule `summary`)."""

from soma import workflow
from soma.workflow import report

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    metric = sm.params.metric
    rows = report.summary_rows(
        sm.input.evaluations,
        sm.input.alone,
        (sm.input.centralized or [None])[0],
        metric,
        sm.params.strategy,
        start=sm.input.start,
    )
    rows = report.with_attendance(rows, sm.input.averages)
    spent = report.round_costs(sm.config, sm.input.averages)  # what each round cost
    rows = report.with_costs(rows, spent)
    report.summary(
        rows,
        metric,
        sm.output.table,
        sm.output.plot,
        page=sm.output.page,
        run=sm.config["run"],
        clients=sm.config["clients"],
        spent=spent.said if spent else "",
    )
