# Evaluation of every round's average, the two baselines, and the summary.


rule evaluate:
    input:
        average=receipt_of_average("{round}"),
        # where the round started: its meeting, beside which each client's own evaluation
        # of the average is kept (soma.evaluation)
        previous=starting_point,
    output:
        f"{RESULTS}/round/{{round}}/evaluation.json",
    log:
        f"{LOGS}/round/{{round}}/evaluation.log",
    benchmark:
        f"{LOGS}/benchmark/round/{{round}}/evaluation.tsv"
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
        f"{RESULTS}/start.json",
    output:
        f"{RESULTS}/alone/{{client}}.json",
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
        f"{RESULTS}/start.json",
    output:
        f"{RESULTS}/centralized.json",
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


rule summary:
    input:
        start=f"{RESULTS}/start.json",
        evaluations=expand(
            f"{RESULTS}/round/{{round}}/evaluation.json", round=range(ROUNDS)
        ),
        # a site's own clients alone; no centralized baseline (no site holds all the data)
        alone=(
            expand(f"{RESULTS}/alone/{{client}}.json", client=here(range(CLIENTS)))
            if BASELINES["alone"]
            else []
        ),
        centralized=(
            [f"{RESULTS}/centralized.json"]
            if BASELINES["centralized"] and HOSTED is None
            else []
        ),
        averages=[receipt_of_average(r) for r in range(ROUNDS)],
    output:
        table=report(
            f"{RESULTS}/summary.tsv",
            caption="../report/summary.rst",
            category="Summary",
            labels={"result": "table (TSV, to download)"},
        ),
        page=report(
            f"{RESULTS}/summary.html",
            caption="../report/table.rst",
            category="Summary",
            labels={"result": "table"},
        ),
        # Named by the metric, so that another metric is another plot, not a stale one.
        plot=report(
            f"{RESULTS}/{config['metric']}.png",
            caption="../report/plot.rst",
            category="Summary",
            labels={"result": "plot"},
        ),
    log:
        f"{LOGS}/summary.log",
    benchmark:
        f"{LOGS}/benchmark/summary.tsv"
    conda:
        "../envs/soma.yaml"
    params:
        metric=config["metric"],
        strategy=config["strategy"],
    script:
        "../scripts/summary.py"
