# The federated rounds: the start, one train job per (round, client) (or per batch of
# `clients_per_job` clients), one average per round. profiles/slurm groups a round's jobs
# into one Slurm submission (Snakemake's `groups:`).


rule start:
    output:
        receipts.start_path(RUN),
        run=receipts.run_record_path(RUN),
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


if SECURE:

    include: "secure.smk"

elif ONE_JOB_A_ROUND:
    pass  # rule `round`, below, trains and averages

elif CLIENTS_PER_JOB == 1:

    rule train:
        input:
            unpack(training_inputs),
        output:
            receipts.client_path(RUN, "{round}", "{client}"),
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

else:

    rule train_batch:
        input:
            unpack(batch_inputs),
        output:
            receipts.batch_path(RUN, "{round}", "{batch}"),
        log:
            f"{LOGS}/round/{{round}}/batch/{{batch}}.log",
        benchmark:
            f"{LOGS}/benchmark/round/{{round}}/batch/{{batch}}.tsv"
        conda:
            "../envs/soma.yaml"
        threads: config["threads"]
        params:
            task=TASK,
            clients=batch_clients,
            before=batch_before,
        script:
            "../scripts/train_batch.py"


if ONE_JOB_A_ROUND:

    rule round:
        input:
            unpack(batch_inputs),
        output:
            batch=receipts.batch_path(RUN, "{round}", 0),
            average=receipts.average_path(RUN, "{round}"),
        log:
            f"{LOGS}/round/{{round}}/round.log",
        benchmark:
            f"{LOGS}/benchmark/round/{{round}}/round.tsv"
        conda:
            "../envs/soma.yaml"
        threads: config["threads"]
        params:
            task=TASK,
            clients=batch_clients,
            before=batch_before,
        script:
            "../scripts/round.py"

else:

    rule average:
        input:
            clients=client_receipts,
            previous=starting_point,
        output:
            receipts.average_path(RUN, "{round}"),
        log:
            f"{LOGS}/round/{{round}}/average.log",
        benchmark:
            f"{LOGS}/benchmark/round/{{round}}/average.tsv"
        conda:
            "../envs/soma.yaml"
        threads: config["threads"]
        script:
            "../scripts/average.py"
