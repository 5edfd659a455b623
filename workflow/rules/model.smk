# The trained model as one plain file: the last round's average as safetensors.


rule model:
    input:
        receipt_of_average(ROUNDS - 1),
    output:
        receipts.results_file(RUN, "model.safetensors"),
    log:
        f"{LOGS}/model.log",
    benchmark:
        f"{LOGS}/benchmark/model.tsv"
    group:
        last_round_group  # in the last round's submission (issue 35)
    conda:
        "../envs/soma.yaml"
    script:
        "../scripts/model.py"


# The round whose federated validation metric (each client on its own held-out data, never
# the central test set) is best, for a task with `evaluate_local` (soma.run.evaluation).
rule best:
    input:
        evaluations=evaluations(),
    output:
        receipts.results_file(RUN, "best.safetensors"),
    log:
        f"{LOGS}/best.log",
    benchmark:
        f"{LOGS}/benchmark/best.tsv"
    group:
        last_round_group  # in the last round's submission (issue 35)
    conda:
        "../envs/soma.yaml"
    script:
        "../scripts/best.py"
