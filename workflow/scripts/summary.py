"""The per-round table (TSV and HTML) and the metric's plot (rule `summary`)."""

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
    report.summary(
        rows,
        metric,
        sm.output.table,
        sm.output.plot,
        page=sm.output.page,
        run=sm.config["run"],
        clients=sm.config["clients"],
    )
