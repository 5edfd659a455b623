# A study (soma.config.study): one run per point of the config's `study:` grid, in this one DAG.
# Each point is this Snakefile again as a module with the point's config, its rules named after
# the point (`fedadam_seed1_train`: soma.config.study.job_names), but for its `start`: the points that start from the same weights (the
# same task, options and seed) share one start job. `results/<study>/summary.tsv` and
# `<metric>.png` compare the points over their seeds (soma.workflow.study).
import json
import os

from soma.config.identity import declared
from soma.config.study import job_names, start_groups
from soma.workflow import receipts
from soma.workflow.configuring import checked
from soma.workflow.dry_run import say_finished

STUDY_RUNS = {point.run: point for point in STUDY.points}
# What `all` asks of a study beyond its table: each run's final weights.
STUDY_MODELS = [
    receipts.results_file(point.run, "model.safetensors") for point in STUDY.points
]

# Each point's config as the schema sees it (the point's values in place), refused naming
# the study and the point.
for point in STUDY.points:
    checked(
        point.config,
        workflow,
        f"{WORKFLOW}/schemas/config.schema.yaml",
        point=point.run,
    )

for point, job in zip(STUDY.points, job_names(STUDY)):
    workflow.module(
        name=job,
        snakefile=os.path.join(WORKFLOW, "Snakefile"),
        config=point.config,
    )
    workflow.userule(
        rules=["*"],
        from_module=job,
        exclude_rules=["start", "all"],
        name_modifier=f"{job}_*",
    )(lambda: None)


def study_targets(wildcards):
    """The rule `all`'s inputs: the study's table and each run's final weights; on a dry run
    of a finished study, one line more saying how to see its DAG (soma.workflow.dry_run).
    """
    targets = [
        receipts.results_file(STUDY.name, "summary.tsv"),
        receipts.results_file(STUDY.name, f"{config['metric']}.png"),
        *STUDY_MODELS,
    ]
    say_finished(workflow, targets)
    return targets


for g, group in enumerate(start_groups(STUDY)):

    rule:
        name:
            f"study_start_{g}"
        output:
            [receipts.start_path(p.run) for p in group],
            [receipts.run_record_path(p.run) for p in group],
        log:
            f"logs/{STUDY.name}/start/{g}.log",
        conda:
            "../envs/soma.yaml"
        threads: config["threads"]
        params:
            runs=[p.run for p in group],
            # rerun when what a point is changed (as a run's `start` does: common.smk TASK)
            task=json.dumps([declared(p.config) for p in group], sort_keys=True),
        script:
            "../scripts/study_start.py"


rule study_summary:
    input:
        [
            path
            for p in STUDY.points
            for path in [
                receipts.results_file(p.run, "summary.tsv"),
                receipts.start_path(p.run),
            ]
            + [receipts.evaluation_path(p.run, r) for r in range(p.config["rounds"])]
        ],
    output:
        table=receipts.results_file(STUDY.name, "summary.tsv"),
        plot=receipts.results_file(STUDY.name, f"{config['metric']}.png"),
    log:
        f"logs/{STUDY.name}/summary.log",
    conda:
        "../envs/soma.yaml"
    params:
        runs=list(STUDY_RUNS),
    script:
        "../scripts/study_summary.py"
