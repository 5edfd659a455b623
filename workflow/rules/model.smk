# The trained model as one plain file: the last round's average as safetensors.


rule model:
    input:
        receipt_of_average(ROUNDS - 1),
    output:
        f"{RESULTS}/model.safetensors",
    log:
        f"{LOGS}/model.log",
    benchmark:
        f"{LOGS}/benchmark/model.tsv"
    conda:
        "../envs/soma.yaml"
    script:
        "../scripts/model.py"
