import json

from soma.participation import last_sampled_before, sampled

# Paths and helpers shared by the rules. Everything of substance lives in `soma.workflow`.

RUN = config["run"]
RESULTS = f"results/{RUN}"
LOGS = f"logs/{RUN}"
ROUNDS = config["rounds"]
CLIENTS = config["clients"]
SEED = config["seed"]
PARTICIPATION = config["participation"]
BASELINES = config["baselines"]
# What a job's result depends on besides its input files, as params, so that Snakemake reruns
# jobs whose task, options or seed changed (its `params` rerun trigger).
TASK = json.dumps(
    {
        "task": config["task"],
        "options": config["task_options"].get(config["task"], {}),
        "seed": config["seed"],
        "clients": CLIENTS,
        "strategy": config["strategy"],
        "strategy_options": config["strategy_options"].get(config["strategy"], {}),
        "participation": PARTICIPATION,
        "quorum": config["quorum"],
    },
    sort_keys=True,
)


wildcard_constraints:
    round=r"\d+",
    client=r"\d+",


def receipt_of_average(round):
    return f"{RESULTS}/round/{round}/average.json"


def starting_point(wildcards):
    """Round 0 starts from the run's seed; round r from round r-1's average."""
    round = int(wildcards.round)
    return f"{RESULTS}/start.json" if round == 0 else receipt_of_average(round - 1)


def training_inputs(wildcards):
    """Where a client starts (the previous average) and, after round 0, its own receipt of
    the round before (which names its own strategy state, e.g. SCAFFOLD's c_i)."""
    inputs = {"previous": starting_point(wildcards)}
    client = int(wildcards.client)
    before = last_sampled_before(
        SEED, int(wildcards.round), CLIENTS, PARTICIPATION, client
    )
    if before is not None:
        inputs["before"] = f"{RESULTS}/round/{before}/client/{client}.json"
    return inputs


def client_receipts(wildcards):
    """The receipts of the clients sampled for the round: only they train in it."""
    return expand(
        f"{RESULTS}/round/{wildcards.round}/client/{{client}}.json",
        client=sampled(SEED, int(wildcards.round), CLIENTS, PARTICIPATION),
    )


def final_targets():
    targets = expand(f"{RESULTS}/round/{{round}}/evaluation.json", round=range(ROUNDS))
    targets.append(f"{RESULTS}/summary.tsv")
    targets.append(f"{RESULTS}/{config['metric']}.png")
    targets.append(f"{RESULTS}/model.safetensors")
    return targets
