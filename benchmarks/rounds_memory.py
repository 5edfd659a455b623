"""benchmarks/rounds.py's section 7: memory per process with a model big enough to see (see
rounds.py's docstring): the tree, the flat stream and the naive average of N exports of 16
MiB, each process's peak above a baseline, and the target judged on it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from _rounds_common import (
    MIB,
    ChildFailed,
    Finished,
    Targets,
    attempt,
    last_json,
    me,
    memory_status,
    mib,
    run_together,
)

# Section 7: exports of one float32 node of 4M floats (16 MiB), averaged through a tree of
# fan-in 8 by 2 processes, flat, and naively; memory sampled from /proc every 20 ms.
MEMORY_FLOATS = 4 << 20
MEMORY_MODEL = MEMORY_FLOATS * 4
MEMORY_FAN_IN = 8
SAMPLE_EVERY = 0.02
MODEL_MEMORY_TARGET = 3.0  # every process's RSS above the baseline, in models


def memory_child(job: dict[str, Any]) -> None:
    """Section 7, one process: the same imports whatever it does (the baseline stops there),
    then the setup (keep N random exports), the tree, the flat stream or the naive average.
    Prints its seconds of work and its own /proc/self/status at the end, as JSON."""
    import torch

    torch.set_num_threads(1)
    from soma.aggregate import fedavg
    from soma.round import holders
    from soma.round.tree import Leaf, reduce
    from soma.store import Store

    what, seconds, made = job["what"], 0.0, {}
    if what != "baseline":
        store = Store(job["store"])
        plan = Path(job["plan"])
        tic = time.perf_counter()
        if what == "setup":
            digests, sizes = [], []
            for k in range(job["clients"]):
                values = torch.randn(job["floats"], generator=torch.Generator().manual_seed(k))
                digests.append(store.put_value({"node": {"weight": values}}))
                sizes.append(1 + k % 7)
                del values
            plan.write_text(json.dumps({"digests": digests, "sizes": sizes}))
        else:
            kept = json.loads(plan.read_text())
            pairs = list(zip(kept["digests"], kept["sizes"], strict=True))
            if what == "tree":
                from soma.timing import DEADLINE, LEASE, Backoff

                leaves = [Leaf(d, float(size)) for d, size in pairs]
                me = holders.me(role="bench", what=job["name"])
                root = reduce(
                    store, "mem", leaves, job["fan_in"], me=me, deadline=DEADLINE, lease=LEASE,
                    backoff=Backoff(), signing=None,
                )  # fmt: skip
                made = {"root": root.mean}
            elif what == "flat":
                fedavg((store.recall_digest(d, lazy=True), size) for d, size in pairs)
            elif what == "naive":
                exports = [store.recall_digest(d) for d, _ in pairs]
                fedavg(exports, [size for _, size in pairs])
        seconds = time.perf_counter() - tic
    print(json.dumps({"work": seconds, "status": memory_status(), **made}))


# --- 7: memory per process, with a model big enough to see -----------------------------------


MEMORY_ROWS = {
    "tree": f"(a) soma.round.tree.reduce, fan-in {MEMORY_FAN_IN}, 2 processes sharing it",
    "flat": "(b) flat soma.fedavg over lazy recalls (an iterator)",
    "naive": "(c) naive: every export recalled eagerly, then soma.fedavg",
}


def _anon(done: Finished) -> int:
    """The peak anonymous memory seen: sampled, or the process's own reading at its end."""
    final = last_json(done.out).get("status", {}).get("RssAnon", 0)
    return max(done.peaks.get("RssAnon", 0), final)


def memory_section(clients: int, folder: Path) -> dict[str, Any]:
    """Keep `clients` exports of MEMORY_MODEL bytes (a helper process), then measure, each
    in fresh processes: a baseline that only imports (twice, the smaller kept), the tree
    with 2 processes, the flat stream, and the naive average."""
    store, plan = folder / "store", folder / "plan.json"

    def job(what: str, name: str = "") -> list[str]:
        return me(
            {"kind": "memory", "what": what, "name": name, "store": str(store),
             "plan": str(plan), "clients": clients, "floats": MEMORY_FLOATS,
             "fan_in": MEMORY_FAN_IN}
        )  # fmt: skip

    section: dict[str, Any] = {"clients": clients, "rows": []}
    try:
        section["setup"], _ = run_together({"setup": job("setup")}, folder / "setup")
        print(f"  memory: {clients} exports of {mib(MEMORY_MODEL)} MiB kept in "
              f"{section['setup']:.1f} s", flush=True)  # fmt: skip
        baselines = [
            run_together({"baseline": job("baseline")}, folder / f"baseline{k}", SAMPLE_EVERY)[1][0]
            for k in range(2)
        ]
        section["baseline"] = {
            "rss": min(b.max_rss for b in baselines),
            "anon": min(_anon(b) for b in baselines),
        }
        commands = {
            "tree": {"p0": job("tree", "p0"), "p1": job("tree", "p1")},
            "flat": {"flat": job("flat")},
            "naive": {"naive": job("naive")},
        }
        for what, row in MEMORY_ROWS.items():
            section["rows"].append(
                attempt({"row": row}, memory_row, row, commands[what], folder / what)
            )
    except ChildFailed as error:
        section["error"] = str(error)
        print(f"  memory: failed: {section['error'][:500]}", flush=True)
    return section


def memory_row(row: str, commands: dict[str, list[str]], folder: Path) -> dict[str, Any]:
    wall, done = run_together(commands, folder, SAMPLE_EVERY)
    reports = [last_json(d.out) for d in done]
    roots = {r["root"] for r in reports if "root" in r}
    if len(roots) > 1:
        raise ChildFailed(f"the tree's processes returned different roots: {sorted(roots)}")
    return {
        "row": row,
        "processes": len(done),
        "wall": wall,
        "work": [r["work"] for r in reports],
        "rss": [d.max_rss for d in done],
        "anon": [_anon(d) for d in done],
        "file": [d.peaks.get("RssFile", 0) for d in done],
        "samples": SAMPLE_EVERY,
    }


def memory_table(section: dict[str, Any]) -> str:
    head = ["row", "processes", "wall s", "work s", "peak RSS above baseline MiB", "in models"]
    head += ["peak anonymous above baseline MiB (sampled)", "in models"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    base = section.get("baseline", {})
    for row in section["rows"]:
        if "error" in row:
            lines.append(f"{row['row']} | failed: {row['error'][:300]}")
            continue
        rss = [r - base["rss"] for r in row["rss"]]
        anon = [a - base["anon"] for a in row["anon"]]

        def each(values: list[int], unit: float, fmt: str) -> str:
            return " / ".join(format(v / unit, fmt) for v in values)

        lines.append(
            " | ".join(
                [
                    row["row"],
                    str(row["processes"]),
                    f"{row['wall']:.1f}",
                    " / ".join(f"{w:.1f}" for w in row["work"]),
                    each(rss, MIB, ".0f"),
                    each(rss, MEMORY_MODEL, ".1f"),
                    each(anon, MIB, ".0f"),
                    each(anon, MEMORY_MODEL, ".1f"),
                ]
            )
        )
    return "\n".join(lines)


def memory_report(section: dict[str, Any]) -> None:
    base = section.get("baseline")
    print(
        f"\n## 7: memory per process: {section['clients']} exports of one float32 node of "
        f"{MEMORY_FLOATS:,} floats (one model = {mib(MEMORY_MODEL)} MiB), kept beforehand by a "
        f"helper process" + (f" in {section['setup']:.1f} s" if "setup" in section else "")
    )
    if base:
        print(
            f"baseline: a process that imports torch, soma.store, soma.round.tree, soma.aggregate, "
            f"soma.round.holders and stops: max RSS {mib(base['rss'])} MiB, anonymous "
            f"{mib(base['anon'])} MiB (the smaller of 2 runs)\n"
        )
    if "error" in section:
        print(f"failed: {section['error'][:1000]}")
    if section["rows"]:
        print(memory_table(section))
    print(
        "\nx / y: each process of the row. work s: the averaging alone, imports excluded. "
        "RSS is the kernel's max RSS (ru_maxrss): it includes the file-backed pages of the "
        "lazily recalled blobs (copy-on-write mmap) while they are mapped and touched, which "
        "the kernel can drop and re-read; anonymous is RssAnon of /proc/<pid>/status, the "
        f"largest of samples every {SAMPLE_EVERY * 1000:.0f} ms and the process's own reading "
        "at its end: a sampled peak, which can miss a spike shorter than the interval."
    )


def bookkeeping(results: dict[str, Any]) -> tuple[float, str] | None:
    """MiB of max RSS per 1,000 clients in section 6's tree rows: the slope between the
    smallest and the largest N (None with one N, as with --quick)."""
    tree = sorted(
        (r for r in results.get("scale", []) if "tree" in r["how"] and "rss" in r),
        key=lambda r: r["clients"],
    )
    if len(tree) < 2 or tree[-1]["clients"] == tree[0]["clients"]:
        return None
    low, high = tree[0], tree[-1]
    grown = max(high["rss"]) - max(low["rss"])
    how = f"from {low['clients']:,} to {high['clients']:,} clients"
    return grown / MIB / (high["clients"] - low["clients"]) * 1000, how


def judge_memory(results: dict[str, Any], targets: Targets) -> None:
    """The memory target on section 7's row (a): every process's anonymous memory above
    the baseline under 3 models; with section 6's bookkeeping projected to 10,000."""
    section = results.get("memory", {})
    base = section.get("baseline")
    tree = next((r for r in section.get("rows", []) if "tree" in r["row"]), {})
    what = (
        "hierarchical aggregation: every process under 3x one model's memory (section 7 "
        "row a, anonymous above baseline)"
    )
    if not base or "anon" not in tree:
        targets.say(what, None, section.get("error", "failed")[:300])
        return
    anon = [(a - base["anon"]) / MEMORY_MODEL for a in tree["anon"]]
    rss = [(r - base["rss"]) / MEMORY_MODEL for r in tree["rss"]]
    measured = (
        f"{section['clients']} clients, fan-in {MEMORY_FAN_IN}, 2 processes: "
        + ", ".join(f"{a:.2f}" for a in anon)
        + f" models of {mib(MEMORY_MODEL)} MiB (sampled every {SAMPLE_EVERY * 1000:.0f} ms); "
        "with the mapped blobs' file pages (max RSS) " + ", ".join(f"{r:.2f}" for r in rss)
    )
    slope = bookkeeping(results)
    if slope is not None:
        per_1000, how = slope
        measured += (
            f"; not in the verdict: section 6's bookkeeping, {per_1000:.1f} MiB per 1,000 "
            f"clients ({how}), is {per_1000 * 10:.0f} MiB = "
            f"{per_1000 * 10 * MIB / MEMORY_MODEL:.2f} models of this size at 10,000 clients"
        )
    targets.say(what, max(anon) < MODEL_MEMORY_TARGET, measured)
