# The federated rounds: the start, one train job per (round, client), one average per round.


rule start:
    output:
        f"{RESULTS}/start.json",
    log:
        f"{LOGS}/start.log",
    benchmark:
        f"{LOGS}/benchmark/start.tsv"
    conda:
        "../envs/soma.yaml"
    threads: config["threads"]
    params:
        task=TASK,
    script:
        "../scripts/start.py"


rule train:
    input:
        unpack(training_inputs),
    output:
        f"{RESULTS}/round/{{round}}/client/{{client}}.json",
    log:
        f"{LOGS}/round/{{round}}/client/{{client}}.log",
    benchmark:
        f"{LOGS}/benchmark/round/{{round}}/client/{{client}}.tsv"
    conda:
        "../envs/soma.yaml"
    threads: config["threads"]
    params:
        task=TASK,
    script:
        "../scripts/train.py"


rule average:
    input:
        clients=client_receipts,
        previous=starting_point,
    output:
        f"{RESULTS}/round/{{round}}/average.json",
    log:
        f"{LOGS}/round/{{round}}/average.log",
    benchmark:
        f"{LOGS}/benchmark/round/{{round}}/average.tsv"
    conda:
        "../envs/soma.yaml"
    threads: config["threads"]
    script:
        "../scripts/average.py"
