"""The starting weights of a study's points that start alike, made once (rule study_start_<g>)."""

from soma import workflow
from soma.config.study import study_of

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm)
    points = {point.run: point for point in study_of(sm.config).points}
    n = len(sm.params.runs)
    workflow.start_group(
        [
            (points[run].config, sm.output[i], sm.output[n + i])
            for i, run in enumerate(sm.params.runs)
        ]
    )
