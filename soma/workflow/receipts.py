"""The workflow's receipts: where each job's receipt lives, and how one is written and read.

Every job's Snakemake output is a small receipt: deterministic JSON (sorted keys; digests,
sizes and metrics; no timestamps, no paths of the machine), written atomically. The weights
themselves live in the store and are never Snakemake outputs (Snakemake deletes a job's
outputs before it reruns it; a store keeps what it has). A receipt names weights by digest,
and the next job reads exactly those weights, so Snakemake's comparison of small files by
checksum tells when a rerun changed anything downstream.

The layout, `results/<run>/…`, is spelled here once: the rules (workflow/rules/*.smk), the
advice that names the receipt to rerun (soma.health.advice) and a study's table
(soma.workflow.study) all call these functions. Pure Python, no torch: the Snakefile imports
it at parse time (the atomic writer, in soma.store, is imported when a receipt is written).
Every function takes its round, client or batch as anything that formats as one, so that
a rule's wildcard (`"{round}"`) gives the rule's pattern and a number gives the path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from soma.config.identity import RECORD

RESULTS = "results"  # in the workflow's folder, beside logs/

Part = int | str  # a number, or a wildcard such as "{round}"


def results_of(run: str, *, results: str = RESULTS) -> str:
    """The folder of a run's receipts (and its summary, plot and model files)."""
    return f"{results}/{run}"


def start_path(run: str, *, results: str = RESULTS) -> str:
    """The start job's receipt: the starting weights and their evaluation."""
    return f"{results_of(run, results=results)}/start.json"


def run_record_path(run: str, *, results: str = RESULTS) -> str:
    """What the run is (soma.config.identity.RECORD), written by its start job."""
    return f"{results_of(run, results=results)}/{RECORD}"


def round_of(run: str, round: Part, *, results: str = RESULTS) -> str:
    """The folder of a round's receipts (0-based, as in the summary and `soma status`)."""
    return f"{results_of(run, results=results)}/round/{round}"


def phase_path(run: str, round: Part, phase: str, client: Part, *, results: str = RESULTS) -> str:
    """A client's receipt of one of its jobs of the round: `client` (its train job) or, under
    secure aggregation, `keys`, `share`, `reveal`."""
    return f"{round_of(run, round, results=results)}/{phase}/{client}.json"


def client_path(run: str, round: Part, client: Part, *, results: str = RESULTS) -> str:
    """A client's train receipt, when each client is its own job (config `clients_per_job` 1)."""
    return phase_path(run, round, "client", client, results=results)


def batch_path(run: str, round: Part, batch: Part, *, results: str = RESULTS) -> str:
    """A batch's train receipt (config `clients_per_job`, or a round in one job: batch 0)."""
    return f"{round_of(run, round, results=results)}/batch/{batch}.json"


def average_path(run: str, round: Part, *, results: str = RESULTS) -> str:
    """The round's average receipt, which the next round starts from."""
    return f"{round_of(run, round, results=results)}/average.json"


def evaluation_path(run: str, round: Part, *, results: str = RESULTS) -> str:
    """The round's evaluation receipt."""
    return f"{round_of(run, round, results=results)}/evaluation.json"


def alone_path(run: str, client: Part, *, results: str = RESULTS) -> str:
    """Client `client`'s alone baseline."""
    return f"{results_of(run, results=results)}/alone/{client}.json"


def centralized_path(run: str, *, results: str = RESULTS) -> str:
    """The centralized baseline."""
    return f"{results_of(run, results=results)}/centralized.json"


def results_file(run: str, name: str, *, results: str = RESULTS) -> str:
    """A run's file beside its receipts: `summary.tsv`, `summary.html`, `<metric>.png`,
    `model.safetensors`, `best.safetensors`."""
    return f"{results_of(run, results=results)}/{name}"


def batches_of(chosen: Sequence[int], clients_per_job: int) -> list[list[int]]:
    """A round's clients (sampled, hosted here, in order) in train jobs of `clients_per_job`."""
    return [list(chosen[i : i + clients_per_job]) for i in range(0, len(chosen), clients_per_job)]


def batch_of(chosen: Sequence[int], clients_per_job: int, client: int) -> int | None:
    """The batch of `batches_of` that holds `client`, or None when it takes no part."""
    for b, batch in enumerate(batches_of(chosen, clients_per_job)):
        if client in batch:
            return b
    return None


def write_receipt(
    path: str | os.PathLike, receipt: Mapping[str, Any], *, mode: int | None = None
) -> None:
    """Deterministic JSON, atomically (`soma.files.write_atomic`): a receipt is a file as the
    umask says; a secret passes `mode=0o600`."""
    from soma.store import files  # looked up when written: soma.store imports torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(receipt, sort_keys=True, indent=2, allow_nan=False) + "\n"
    files.write_atomic(path, text.encode("utf-8"), mode=mode)


def read_receipt(path: str | os.PathLike) -> dict[str, Any]:
    """A receipt as its job wrote it."""
    with open(path, encoding="utf-8") as receipt:
        return json.load(receipt)


def clients_in(receipt: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The client receipts in a receipt: itself, or a batch's (config `clients_per_job`)."""
    return list(receipt["clients"]) if "clients" in receipt else [dict(receipt)]
