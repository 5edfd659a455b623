# Evaluation of every round's average, the two baselines, and the summary.


rule evaluate:
    input:
        receipt_of_average("{round}"),
    output:
        f"{RESULTS}/round/{{round}}/evaluation.json",
    log:
        f"{LOGS}/round/{{round}}/evaluation.log",
    conda:
        "../envs/soma.yaml"
    threads: config["threads"]
    params:
        task=TASK,
    script:
        "../scripts/evaluate.py"


rule alone:
    input:
        f"{RESULTS}/start.json",
    output:
        f"{RESULTS}/alone/{{client}}.json",
    log:
        f"{LOGS}/alone/{{client}}.log",
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
        evaluations=expand(
            f"{RESULTS}/round/{{round}}/evaluation.json", round=range(ROUNDS)
        ),
        alone=(
            expand(f"{RESULTS}/alone/{{client}}.json", client=range(CLIENTS))
            if BASELINES["alone"]
            else []
        ),
        centralized=[f"{RESULTS}/centralized.json"] if BASELINES["centralized"] else [],
    output:
        table=report(
            f"{RESULTS}/summary.tsv",
            caption="../report/summary.rst",
            category="Summary",
        ),
        plot=report(
            f"{RESULTS}/accuracy.png",
            caption="../report/accuracy.rst",
            category="Summary",
        ),
    log:
        f"{LOGS}/summary.log",
    conda:
        "../envs/soma.yaml"
    script:
        "../scripts/summary.py"
