# A round under secure aggregation (config `secure_aggregation`): each phase of soma.secagg
# a job per client, each after the phase before is done for every client of the round (the
# DAG is the barrier), then the round's average unmasks the sum. See soma/workflow/secure.py.
# A client's secrets between its jobs are no output of them: they live in the client's own
# folder (config `secure_aggregation.secrets`, soma.config.secrets), which the user running
# Snakemake may not be able to read, and its reveal job deletes them.


rule keys:
    input:
        previous=starting_point,
    output:
        receipt=receipts.phase_path(RUN, "{round}", "keys", "{client}"),
    log:
        f"{LOGS}/round/{{round}}/keys/{{client}}.log",
    benchmark:
        f"{LOGS}/benchmark/round/{{round}}/keys/{{client}}.tsv"
    conda:
        "../envs/soma.yaml"
    params:
        task=TASK,
    script:
        "../scripts/secure_keys.py"


rule share:
    input:
        previous=starting_point,
        advertised=phase_receipts("keys"),
    output:
        receipt=receipts.phase_path(RUN, "{round}", "share", "{client}"),
    log:
        f"{LOGS}/round/{{round}}/share/{{client}}.log",
    benchmark:
        f"{LOGS}/benchmark/round/{{round}}/share/{{client}}.tsv"
    conda:
        "../envs/soma.yaml"
    params:
        task=TASK,
    script:
        "../scripts/secure_share.py"


rule train:
    input:
        previous=starting_point,
        shares=phase_receipts("share"),
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
        "../scripts/secure_train.py"


rule reveal:
    input:
        previous=starting_point,
        trained=receipts.client_path(RUN, "{round}", "{client}"),
        everyone=phase_receipts("client"),
    output:
        receipts.phase_path(RUN, "{round}", "reveal", "{client}"),
    log:
        f"{LOGS}/round/{{round}}/reveal/{{client}}.log",
    benchmark:
        f"{LOGS}/benchmark/round/{{round}}/reveal/{{client}}.tsv"
    conda:
        "../envs/soma.yaml"
    params:
        task=TASK,
    script:
        "../scripts/secure_reveal.py"
