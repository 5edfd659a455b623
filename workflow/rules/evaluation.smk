# Evaluation of every round's average, the two baselines, and the summary.


rule evaluate:
    input:
        average=receipt_of_average("{round}"),
        # where the round started: its meeting, beside which each client's own evaluation
        # of the average is kept (soma.run.evaluation)
        previous=starting_point,
    output:
        receipts.evaluation_path(RUN, "{round}"),
    log:
        f"{LOGS}/round/{{round}}/evaluation.log",
    benchmark:
        f"{LOGS}/benchmark/round/{{round}}/evaluation.tsv"
    group:
        evaluation_group  # in the next round's submission (issue 35)
    conda:
        "../envs/soma.yaml"
    threads: config["threads"]
    params:
        task=TASK,
        # who evaluates on their own data: another draw reruns the evaluations
        evaluate_participation=config.get("evaluate_participation"),
    script:
        "../scripts/evaluate.py"


rule alone:
    input:
        receipts.start_path(RUN),
    output:
        receipts.alone_path(RUN, "{client}"),
    log:
        f"{LOGS}/alone/{{client}}.log",
    benchmark:
        f"{LOGS}/benchmark/alone/{{client}}.tsv"
    conda:
        "../envs/soma.yaml"
    threads: config["threads"]
    params:
        task=TASK,
        rounds=ROUNDS,
    script:
        "../scripts/alone.py"


rule centralized:
    input:
        receipts.start_path(RUN),
    output:
        receipts.centralized_path(RUN),
    log:
        f"{LOGS}/centralized.log",
    benchmark:
        f"{LOGS}/benchmark/centralized.tsv"
    conda:
        "../envs/soma.yaml"
    threads: config["threads"]
    params:
        task=TASK,
        rounds=ROUNDS,
    script:
        "../scripts/centralized.py"


# The baselines the summary compares with: a site's own clients alone; no centralized
# baseline at a site (no site holds all the data).
ALONE = (
    [receipts.alone_path(RUN, k) for k in here(range(CLIENTS))]
    if BASELINES["alone"]
    else []
)
CENTRALIZED = (
    [receipts.centralized_path(RUN)]
    if BASELINES["centralized"] and HOSTED is None
    else []
)


rule summary:
    input:
        start=receipts.start_path(RUN),
        evaluations=evaluations(),
        alone=ALONE,
        centralized=CENTRALIZED,
        averages=[receipt_of_average(r) for r in range(ROUNDS)],
    output:
        table=report(
            receipts.results_file(RUN, "summary.tsv"),
            caption="../report/summary.rst",
            category="Summary",
            labels={"result": "table (TSV, to download)"},
        ),
        page=report(
            receipts.results_file(RUN, "summary.html"),
            caption="../report/table.rst",
            category="Summary",
            labels={"result": "table"},
        ),
        # Named by the metric, so that another metric is another plot, not a stale one.
        plot=report(
            receipts.results_file(RUN, f"{config['metric']}.png"),
            caption="../report/plot.rst",
            category="Summary",
            labels={"result": "plot"},
        ),
    log:
        f"{LOGS}/summary.log",
    benchmark:
        f"{LOGS}/benchmark/summary.tsv"
    # In the last round's submission, unless it waits for baselines: there it would hold the
    # last round back until they end (they train beside the rounds, as long as all of them).
    group:
        None if ALONE or CENTRALIZED else last_round_group
    conda:
        "../envs/soma.yaml"
    params:
        metric=config["metric"],
        strategy=config["strategy"],
    script:
        "../scripts/summary.py"
