"""benchmarks/rounds.py's section 6: one round of 1,000 and 10,000 control clients through the
tree, flat, and in one process; the baselines of memory; and `snakemake -n` of a big run
(see rounds.py's docstring)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from _rounds_common import (
    BASELINE_IMPORTS,
    CONTROL,
    CONTROL_OPTIONS,
    DAG_CLIENTS,
    DAG_ROUNDS,
    FAN_IN,
    last_json,
    me,
    mib,
    model_bytes,
    run_together,
    snakemake,
    soma_client,
)

DAG_TARGET = 30.0  # seconds of `snakemake -n`


def scale_floor_child(clients: int) -> None:
    """N control clients trained in this process and folded into one soma.fedavg (an
    iterator of (export, size): one model held at a time)."""
    import torch

    torch.set_num_threads(1)
    from soma import fedavg
    from soma.nodes import export, load
    from soma.tasks import load_task

    task = load_task(CONTROL, CONTROL_OPTIONS)
    nodes = task.nodes(0)
    start = export(nodes)
    training = 0.0

    def trained():
        nonlocal training
        for k in range(clients):
            tic = time.perf_counter()
            load(nodes, start)
            data = task.shard(k, clients)
            task.train(nodes, data, seed=k)
            weights = export(nodes)
            training += time.perf_counter() - tic
            yield weights, task.size(data)

    tic = time.perf_counter()
    mean = fedavg(trained())
    loop = time.perf_counter() - tic
    print(json.dumps({"loop": loop, "averaging": loop - training, "model": model_bytes(mean)}))


def _timed_method(cls: type, name: str, totals: dict[str, float]) -> None:
    method = getattr(cls, name)

    def timed(self, *args, **kwargs):
        tic = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - tic

    setattr(cls, name, timed)


def client_child(argv: list[str], report: str) -> int:
    """`soma client argv...`, timing its averaging: when this process last contributed and
    got each round's average (time.time(), comparable across processes), and the seconds it
    spent checking the inputs, building tree nodes and computing the final average."""
    import soma.round as round_module
    from soma import cli

    seconds = {"check": 0.0, "share": 0.0, "compute": 0.0}
    contributed: dict[int, float] = {}
    averaged: dict[int, float] = {}
    contribute, average_round = round_module.contribute, round_module.average_round

    def timed_contribute(store, meeting, *args, **kwargs):
        made = contribute(store, meeting, *args, **kwargs)
        contributed[meeting.round] = time.time()
        return made

    def timed_average_round(store, meeting, **kwargs):
        digest = average_round(store, meeting, **kwargs)
        averaged[meeting.round] = time.time()
        return digest

    round_module.contribute = timed_contribute
    round_module.average_round = timed_average_round
    for name in seconds:
        _timed_method(round_module._Averaging, name, seconds)
    code = cli.main(argv)
    times = {"seconds": seconds, "contributed": contributed, "averaged": averaged}
    Path(report).write_text(json.dumps(times))
    return code


def baseline_rss(folder: Path) -> int:
    """The max RSS of a process that only imports torch and the soma modules a client uses."""
    _, done = run_together({"baseline": [sys.executable, "-c", BASELINE_IMPORTS]}, folder)
    return done[0].max_rss


# --- 6: one round of many clients, and the DAG of a big run --------------------------------


def scale_floor(clients: int, folder: Path) -> dict[str, Any]:
    wall, done = run_together({"floor": me({"kind": "scale_floor", "clients": clients})}, folder)
    result = last_json(done[0].out)
    return {
        "clients": clients,
        "how": "in-process floor",
        "processes": 1,
        "wall": wall,
        "averaging": result["averaging"],
        "rss": [done[0].max_rss],
        "model": result["model"],
        "parts": None,
    }


def one_round(clients: int, tree: int | None, folder: Path) -> dict[str, Any]:
    """One round of `clients` control clients over 2 processes, each timing its averaging."""
    store, half = folder / "store", clients // 2
    extra = ("--tree", str(tree)) if tree else ()
    commands, reports = {}, []
    for name, mine in (("a", f"0-{half - 1}"), ("b", f"{half}-{clients - 1}")):
        reports.append(folder / f"{name}.times.json")
        argv = soma_client(store, 1, clients, mine, CONTROL, *extra)
        commands[name] = me({"kind": "client", "argv": argv, "report": str(reports[-1])})
    wall, done = run_together(commands, folder)
    times = [json.loads(path.read_text()) for path in reports]
    averaging = max(t["averaged"]["0"] for t in times) - max(t["contributed"]["0"] for t in times)
    parts = {name: max(t["seconds"][name] for t in times) for name in ("check", "share", "compute")}
    how = f"soma client, tree {tree}" if tree else "soma client, flat"
    return {
        "clients": clients,
        "how": how,
        "processes": 2,
        "wall": wall,
        "averaging": averaging,
        "rss": [d.max_rss for d in done],
        "parts": parts,
    }


def one_client_rss(folder: Path) -> int:
    """The max RSS of a `soma client` process that trains one control client for one round."""
    argv = soma_client(folder / "store", 1, 1, "0", CONTROL)
    _, done = run_together({"one": [sys.executable, "-m", "soma.cli", *argv]}, folder)
    return done[0].max_rss


def scale_table(rows: list[dict[str, Any]], baseline: int, one_client: int) -> str:
    head = ["clients", "how", "processes", "wall s", "x floor", "averaging s"]
    head += ["check/tree/final s", "largest max RSS MiB", "above baseline MiB", "in models"]
    head += ["above 1-client process MiB"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    floors = {row["clients"]: row for row in rows if row["how"] == "in-process floor"}
    for row in rows:
        if "error" in row:
            lines.append(f"{row['clients']} | {row['how']} | failed: {row['error'][:300]}")
            continue
        floor = floors.get(row["clients"])
        ratio = "-" if floor is None or "error" in floor else f"{row['wall'] / floor['wall']:.2f}"
        model = next((r["model"] for r in rows if "model" in r), None)
        above = max(row["rss"]) - baseline
        in_models = "-" if not model else f"{above / model:,.0f}"
        parts = row["parts"]
        split = "-" if parts is None else "/".join(f"{parts[k]:.2f}" for k in parts)
        lines.append(
            " | ".join(
                [
                    f"{row['clients']:,}",
                    row["how"],
                    str(row["processes"]),
                    f"{row['wall']:.1f}",
                    ratio,
                    f"{row['averaging']:.2f}",
                    split,
                    mib(max(row["rss"])),
                    mib(above),
                    in_models,
                    mib(max(row["rss"]) - one_client),
                ]
            )
        )
    return "\n".join(lines)


def dry_run(per_job: int, folder: Path) -> dict[str, Any]:
    """`snakemake -n` of the 1,000-client, 10-round control run with `per_job` per train job."""
    config = [f"task={CONTROL}", "metric=loss", f"clients={DAG_CLIENTS}", f"rounds={DAG_ROUNDS}"]
    config += [f"clients_per_job={per_job}", f"tree={{fan_in: {FAN_IN}}}", "run=dag"]
    wall, done = run_together({"dry": snakemake(folder, config, "-n")}, folder)
    total = re.search(r"^total\s+(\d+)", done[0].out.read_text(), re.MULTILINE)
    jobs = int(total.group(1)) if total else None
    return {"per_job": per_job, "wall": wall, "jobs": jobs, "rss": done[0].max_rss}


def dag_table(rows: list[dict[str, Any]]) -> str:
    lines = ["clients_per_job | jobs | snakemake -n s | max RSS MiB", "--- | --- | --- | ---"]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['per_job']} | failed: {row['error'][:300]}")
        else:
            lines.append(
                f"{row['per_job']} | {row['jobs']} | {row['wall']:.1f} | {mib(row['rss'])}"
            )
    return "\n".join(lines)
