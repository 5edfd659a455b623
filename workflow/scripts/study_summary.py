"""A study's table and plot over its points and seeds (rule study_summary)."""

from soma import workflow
from soma.config.study import study_of
from soma.workflow import study

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    study.study_summary(study_of(sm.config), sm.config["metric"], sm.output.table, sm.output.plot)
