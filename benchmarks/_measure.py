"""Small measuring helpers for the benchmarks: resident memory, its peak, and fresh processes.

Peak memory is read from the kernel (VmHWM in /proc/self/status), after resetting it by
writing "5" to /proc/self/clear_refs (Linux >= 4.0), so a peak covers only what ran since
the reset: no sampling thread, nothing missed between samples. Each measurement should run
in a fresh process (`run_child`), so one variant's peak never includes another's leftovers.

Children get MALLOC_MMAP_THRESHOLD_ fixed at 128 KiB: glibc then hands every large tensor
back to the kernel when it is freed, instead of keeping it on the heap where a later
allocation would reuse it without raising the resident size (which would hide it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence

_STATUS = "/proc/self/status"


def _status_kib(field: str) -> int:
    with open(_STATUS) as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{field} is not in {_STATUS}")
    return int(match.group(1))


def rss_bytes() -> int:
    """The resident set size of this process now."""
    return _status_kib("VmRSS") * 1024


def peak_rss_bytes() -> int:
    """The highest resident set size since the process started or `reset_peak_rss`."""
    return _status_kib("VmHWM") * 1024


def reset_peak_rss() -> None:
    """Make the peak the current resident size, so that the next peak is the next thing's."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def trim() -> None:
    """Hand freed heap memory back to the kernel (glibc malloc_trim), so that what was freed
    before a baseline is not silently reused, unseen, by what is measured after it."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def memory_available_bytes() -> int:
    """What the kernel thinks can still be allocated without swapping (MemAvailable)."""
    with open("/proc/meminfo") as meminfo:
        match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo.read(), re.MULTILINE)
    if match is None:
        raise RuntimeError("MemAvailable is not in /proc/meminfo")
    return int(match.group(1)) * 1024


def child_env(threads: int) -> dict[str, str]:
    """The environment for a measuring child: thread counts pinned, large frees returned."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)
    return env


def run_child(argv: Sequence[str], threads: int, timeout: float | None = None) -> dict:
    """Run `python argv...` in a fresh process; its last stdout line is a JSON object."""
    result = subprocess.run(
        [sys.executable, *argv],
        env=child_env(threads),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        tail = (result.stdout + result.stderr)[-2000:]
        return {"error": f"exit {result.returncode}: {tail.strip()}"}
    return json.loads(lines[-1])


def emit(record: dict) -> None:
    """What a child reports back to `run_child`."""
    print(json.dumps(record), flush=True)


def parse_size(text: str) -> int:
    """ "100MB", "1GB", "64KB" or a number of bytes."""
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "B": 1}
    text = text.strip().upper()
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def plain_federation(task, clients: int, rounds: int):
    """The floor every federated figure is measured against: `clients` clients of `task`
    trained in this process round after round with soma's seeds (the start from seed 0,
    client k of round r with `training_seed(0, r, k)`) and folded by soma.fedavg, nothing
    written. The nodes at the last average, and its weights."""
    from soma import fedavg
    from soma.nodes import export, load
    from soma.training import training_seed

    shards = [task.shard(k, clients) for k in range(clients)]
    nodes = task.nodes(0)
    weights = export(nodes)
    for r in range(rounds):
        exports = []
        for k, data in enumerate(shards):
            load(nodes, weights)
            task.train(nodes, data, seed=training_seed(0, r, k))
            exports.append(export(nodes))
        weights = fedavg(exports, [task.size(data) for data in shards])
    load(nodes, weights)
    return nodes, weights
