import functools
import json

from soma.config.participation import last_sampled_before, sampled
from soma.config.identity import check_recorded, declared
from soma.config.spec import RunSpec
from soma.tasks import defines
from soma.workflow import receipts
from soma.workflow.dry_run import say_finished

# Paths and helpers shared by the rules. Everything of substance lives in `soma.workflow`;
# the receipts' paths are spelled once, in soma.workflow.receipts.

RUN = config["run"]
RESULTS = receipts.results_of(RUN)
LOGS = f"logs/{RUN}"
ROUNDS = config["rounds"]
CLIENTS = config["clients"]
SEED = config["seed"]
PARTICIPATION = config["participation"]
CLIENTS_PER_JOB = config["clients_per_job"]
SECURE = config["secure_aggregation"] is not None
# Across institutions (config `site`, `sites`): this snakemake's clients (None: every one);
# each round's average then waits for the whole round in the store (soma.workflow.average).
HOSTED = RunSpec.from_config(config).hosted
# A batch as large as a round's sample: the round is one job, that trains every client and
# averages them (one interpreter, one torch import a round), writing both receipts.
# At a site (config `site`), a batch as large as its clients: the job trains its own and
# averages the whole round (waiting for the other sites' clients in the store).
ONE_JOB_A_ROUND = not SECURE and CLIENTS_PER_JOB >= (
    len(sampled(SEED, 0, CLIENTS, PARTICIPATION)) if HOSTED is None else len(HOSTED)
)
BASELINES = config["baselines"]
# A task whose module defines evaluate_local (read, not run) has federated evaluation, and
# so a best round to export (results/<run>/best.safetensors); never under secure
# aggregation, where each client's metrics would be in clear (RunSpec.evaluating).
# A site evaluates its own clients, and the round's record is kept in the store, not in
# its receipts: no best round under `site`.
FEDERATED_EVALUATION = (
    not SECURE and HOSTED is None and defines(config["task"], "evaluate_local")
)
# What a job's result depends on besides its input files, as params, so that Snakemake reruns
# jobs whose task, options or seed changed (its `params` rerun trigger).
TASK = json.dumps(declared(config), sort_keys=True)
# A results folder that another config made is not run over: refused here, before any job,
# naming the keys that differ (its `run.json`, written by the `start` job).
check_recorded(RESULTS, config)
# A site whose roster (or averagers) is not the run's, as its charter in the store says, is
# refused here too, naming the roster file (soma.round.signing).
if config.get("roster"):
    RunSpec.from_config(config).check_charter_at(config["store"])


def averaging_group(round_):
    """The submission of round `round_`'s averaging (the profile's `groups:`, e.g.
    `average=round{round}`). None without groups (every job its own submission) or run
    locally. For a rule's `group:` function: Snakemake knows the profile's groups when it
    builds the DAG, not yet when it reads the Snakefile."""
    averaging = "round" if ONE_JOB_A_ROUND else "average"
    named = workflow.group_settings.overwrite_groups.get(averaging)
    return None if named is None else named.format(round=round_)


def last_round_group(wildcards=None):
    """The last round's submission, which the finishing jobs join: one Slurm submission
    fewer a run (issue 35)."""
    return averaging_group(ROUNDS - 1)


def evaluation_group(wildcards):
    """Round r's evaluation in round r+1's submission (the last round's in its own), beside
    r+1's training, which needs only r's average, as a local run runs them: the next round
    is not submitted behind an evaluation (issue 35)."""
    return averaging_group(min(int(wildcards.round) + 1, ROUNDS - 1))


def here(clients):
    """Of `clients`, those this snakemake hosts (config `site`; all of them without one)."""
    return list(clients) if HOSTED is None else [k for k in clients if k in HOSTED]


wildcard_constraints:
    round=r"\d+",
    client=r"\d+",
    batch=r"\d+",


def receipt_of_average(round):
    return receipts.average_path(RUN, round)


def starting_point(wildcards):
    """Round 0 starts from the run's seed; round r from round r-1's average."""
    round = int(wildcards.round)
    return receipts.start_path(RUN) if round == 0 else receipt_of_average(round - 1)


@functools.lru_cache(maxsize=None)
def batches(round):
    """The round's sampled clients hosted here, in order, split into train jobs of
    `clients_per_job`."""
    return receipts.batches_of(
        here(sampled(SEED, round, CLIENTS, PARTICIPATION)), CLIENTS_PER_JOB
    )


def receipt_of_client(round, client):
    """The receipt that holds what `client` did in `round`: its own, or its batch's."""
    if CLIENTS_PER_JOB == 1:
        return receipts.client_path(RUN, round, client)
    for b, batch in enumerate(batches(round)):
        if client in batch:
            return receipts.batch_path(RUN, round, b)
    raise ValueError(f"client {client} takes no part in round {round}")


def before_of(round, client):
    """The client's receipt of the last round it trained in before `round`, if any: it
    names the client's own strategy state (SCAFFOLD's c_i)."""
    before = last_sampled_before(SEED, round, CLIENTS, PARTICIPATION, client)
    return None if before is None else receipt_of_client(before, client)


def training_inputs(wildcards):
    """Where a client starts (the previous average) and, after its first round, its receipt
    of the round before it trained."""
    inputs = {"previous": starting_point(wildcards)}
    before = before_of(int(wildcards.round), int(wildcards.client))
    if before is not None:
        inputs["before"] = before
    return inputs


def batch_clients(wildcards):
    """The batch's clients; a round in one job (ONE_JOB_A_ROUND) is its batch 0, empty at a
    site none of whose clients the round samples."""
    found = batches(int(wildcards.round))
    return found[int(getattr(wildcards, "batch", 0))] if found else []


def batch_before(wildcards):
    """Each of the batch's clients' receipt of the last round it trained in (or None)."""
    round = int(wildcards.round)
    return {k: before_of(round, k) for k in batch_clients(wildcards)}


def batch_inputs(wildcards):
    befores = {path for path in batch_before(wildcards).values() if path is not None}
    return {"previous": starting_point(wildcards), "before": sorted(befores)}


def phase_receipts(phase):
    """An input function: every sampled client's receipt of `phase` in the round (secure
    aggregation's barrier: a phase starts once the one before is done everywhere)."""

    def of_phase(wildcards):
        round = int(wildcards.round)
        return [
            receipts.phase_path(RUN, round, phase, client)
            for client in sampled(SEED, round, CLIENTS, PARTICIPATION)
        ]

    return of_phase


def client_receipts(wildcards):
    """The receipts of the clients sampled for the round (only they train in it), of those
    hosted here: one per client, or one per batch of `clients_per_job`."""
    round = int(wildcards.round)
    if SECURE:  # the average unmasks once every client revealed its shares
        return phase_receipts("reveal")(wildcards)
    if CLIENTS_PER_JOB == 1:
        return [
            receipts.client_path(RUN, round, client)
            for client in here(sampled(SEED, round, CLIENTS, PARTICIPATION))
        ]
    return [receipts.batch_path(RUN, round, b) for b in range(len(batches(round)))]


def final_targets():
    targets = evaluations()
    targets.append(receipts.results_file(RUN, "summary.tsv"))
    targets.append(receipts.results_file(RUN, f"{config['metric']}.png"))
    targets.append(receipts.results_file(RUN, "model.safetensors"))
    if FEDERATED_EVALUATION:
        targets.append(receipts.results_file(RUN, "best.safetensors"))
    return targets


def all_targets(wildcards):
    """The rule `all`'s inputs; on a dry run of a finished run, one line more saying how to
    see the DAG of rounds (soma.workflow.dry_run: a dry run is known only now)."""
    targets = final_targets()
    say_finished(workflow, targets)
    return targets


def evaluations():
    """Every round's evaluation receipt, in round order."""
    return [receipts.evaluation_path(RUN, r) for r in range(ROUNDS)]
