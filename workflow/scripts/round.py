"""A whole round in one job: every client trained, then averaged (rule `round`, when
`clients_per_job` is at least the round's sample): the receipts of `train_batch` and
`average`, byte for byte, from one interpreter."""

from soma import workflow

sm = snakemake  # noqa: F821
with workflow.logged(sm.log[0]):
    workflow.threads(sm)
    round = int(sm.wildcards.round)
    workflow.train_batch(
        sm.config,
        round,
        0,
        list(sm.params.clients),
        sm.input.previous,
        sm.output.batch,
        before=dict(sm.params.before),
    )
    workflow.average(sm.config, round, [sm.output.batch], sm.input.previous, sm.output.average)
