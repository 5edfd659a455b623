"""Small measuring helpers for the benchmarks: resident memory, its peak, and fresh processes.

Peak memory is read from the kernel (VmHWM in /proc/self/status), after resetting it by
writing "5" to /proc/self/clear_refs (Linux >= 4.0), so a peak covers only what ran since
the reset: no sampling thread, nothing missed between samples. Each measurement should run
in a fresh process (`run_child`), so one variant's peak never includes another's leftovers.

Children get MALLOC_MMAP_THRESHOLD_ fixed at 128 KiB: glibc then hands every large tensor
back to the kernel when it is freed, instead of keeping it on the heap where a later
allocation would reuse it without raising the resident size (which would hide it).

And the one writer of a benchmark's results file (`recorded`, `write_result`):
benchmarks/results/<name>.md, the run's printout under a header that says when, by which
command, on what machine and under what load it was taken. The docs' page of the benchmark
includes that file, so a dated run is data the benchmark wrote, not prose someone retyped.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from soma.files import write_atomic

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


@dataclass(frozen=True)
class Timed:
    """One run of a command: wall seconds, CPU seconds (user and system, its own and its
    children's) and user seconds, and the last line it printed."""

    wall: float
    cpu: float
    user: float
    last: str = ""


def timed(command: Sequence[str], *, env: Mapping[str, str], cwd: str | None = None) -> Timed:
    """Run `command` to its end, timed: wall from start to exit, CPU from the kernel's count
    of this process's children (so a command's own children are in it)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    out = subprocess.run(command, check=True, env=dict(env), stdout=subprocess.PIPE, text=True,
                         cwd=cwd).stdout  # fmt: skip
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user = after.ru_utime - before.ru_utime
    last = (out.strip().splitlines() or [""])[-1]
    return Timed(wall, user + after.ru_stime - before.ru_stime, user, last)


def alternated(rows: Mapping[str, Callable[[int], Timed]], pairs: int) -> dict[str, list[Timed]]:
    """Each row's runs, `pairs` of them: run i of every row is run next to run i of the others,
    in the rows' order on even i and the reverse on odd i (A B B A), so that a load that
    changes during the benchmark falls on every row alike, and a steady drift cancels over
    two turns. A row's run i is compared with the floor's run i (`ratio`), never with a run
    minutes away."""
    runs: dict[str, list[Timed]] = {row: [] for row in rows}
    for i in range(pairs):
        for row in list(rows) if i % 2 == 0 else list(rows)[::-1]:
            runs[row].append(rows[row](i))
    return runs


def ratio(runs: Sequence[Timed], floor: Sequence[Timed], what: str) -> tuple[float, float, float]:
    """The median of the per-pair ratios runs[i].what / floor[i].what, and their least and
    greatest (the spread the load made)."""
    each = [getattr(r, what) / getattr(f, what) for r, f in zip(runs, floor, strict=True)]
    return statistics.median(each), min(each), max(each)


def plain_federation(task, clients: int, rounds: int, *, average=None, after=None):
    """The floor every federated figure is measured against: `clients` clients of `task`
    trained in this process round after round with soma's seeds (the start from seed 0,
    client k of round r with `training_seed(0, r, k)`) and folded by soma.fedavg, nothing
    written. The nodes at the last average, and its weights.

    `average(exports, sizes)` stands in for soma.fedavg (a benchmark that times it wraps
    it); `after(nodes)` is called with each round's average loaded (one that evaluates it)."""
    from soma import fedavg
    from soma.nodes import export, load
    from soma.training import training_seed

    average = average or fedavg

    shards = [task.shard(k, clients) for k in range(clients)]
    nodes = task.nodes(0)
    weights = export(nodes)
    for r in range(rounds):
        exports = []
        for k, data in enumerate(shards):
            load(nodes, weights)
            task.train(nodes, data, seed=training_seed(0, r, k))
            exports.append(export(nodes))
        weights = average(exports, [task.size(data) for data in shards])
        if after is not None:
            load(nodes, weights)
            after(nodes)
    load(nodes, weights)
    return nodes, weights


RESULTS = Path(__file__).resolve().parent / "results"
# Where a results file goes when the benchmark is not told (`--out` where it has one): a quick
# or smoke run points this at a temporary folder, so that it never replaces a recorded run.
RESULTS_ENV = "SOMA_BENCHMARK_RESULTS"
# A results file is its runs, newest first, each under a heading that starts so (a printout's
# own "## " lines, inside its text block, start none); the writer keeps EARLIER_KEPT earlier
# runs below the new one (git keeps the rest).
RUN_HEADING = "## Run of "
HAND_HEADING = "## Recorded by hand"
EARLIER_KEPT = 4


def results_folder(out: str | os.PathLike[str] | None = None) -> Path:
    """The folder a results file goes to: `out`, else $SOMA_BENCHMARK_RESULTS, else
    benchmarks/results."""
    if out is not None:
        return Path(out)
    return Path(os.environ.get(RESULTS_ENV) or RESULTS)


def machine() -> str:
    """This machine in one line: CPU model, cores, torch's version and CPU capability."""
    model = platform.machine() or "unknown CPU"  # /proc/cpuinfo names it, below
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read(), re.MULTILINE)
        model = found.group(1).strip() if found else model
    try:
        import torch
    except ImportError:
        return f"{model}, {os.cpu_count()} cores, no torch"
    capability = torch.backends.cpu.get_cpu_capability()
    return (
        f"{model}, {os.cpu_count()} cores, torch {torch.__version__}, CPU capability {capability}"
    )


@dataclass(frozen=True)
class Started:
    """What a run's header needs from its start: when, by which command, under what load."""

    when: float = field(default_factory=time.time)
    argv: tuple[str, ...] = field(default_factory=lambda: tuple(sys.argv))
    load: float = field(default_factory=lambda: os.getloadavg()[0])


def _command(argv: Sequence[str]) -> str:
    script, *rest = argv or ["?"]
    try:
        script = str(Path(script).resolve().relative_to(RESULTS.parent.parent))
    except ValueError:
        pass
    return shlex.join(["python", script, *rest])


def result_text(
    lines: Sequence[str],
    *,
    started: Started,
    ended_load: float,
    pairs: str | None = None,
    notes: Sequence[str] = (),
) -> str:
    """One run's section of a results file: its header and `lines` (the printout) verbatim."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started.when))
    header = [
        f"{RUN_HEADING}{when}",
        "",
        "| | |",
        "| --- | --- |",
        f"| command | `{_command(started.argv)}` |",
        f"| machine | {machine()} |",
        f"| load average | {started.load:.2f} at the start, {ended_load:.2f} at the end |",
    ]
    if pairs:
        header.append(f"| pairs or repeats | {pairs} |")
    body = ["", "````text", *lines, "````"]  # four: a printout may hold three
    return "\n".join([*header, *body, *(["", *notes] if notes else []), ""])


def earlier_runs(text: str) -> list[str]:
    """The runs of a results file, newest first: each from its run heading to the next (text
    before the first, such as "no run recorded yet", is no run)."""
    headings = "|".join(re.escape(h) for h in (RUN_HEADING, HAND_HEADING))
    sections = re.split(rf"(?m)^(?={headings})", text)
    return [s.rstrip("\n") + "\n" for s in sections if s.startswith((RUN_HEADING, HAND_HEADING))]


def write_result(
    name: str,
    lines: Sequence[str],
    *,
    started: Started,
    out: str | os.PathLike[str] | None = None,
    pairs: str | None = None,
    notes: Sequence[str] = (),
) -> Path:
    """Write the run whose printout is `lines` as the newest of `<folder>/<name>.md` (see
    `results_folder`), keeping the file's EARLIER_KEPT runs before it below; the file is
    replaced whole (soma.files.write_atomic), never left half-written. Its path."""
    if not re.fullmatch(r"[a-z0-9_-]+", name):
        raise ValueError(f"results file name {name!r}: lowercase letters, digits, _ and - only")
    folder = results_folder(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    new = result_text(
        lines, started=started, ended_load=os.getloadavg()[0], pairs=pairs, notes=notes
    )
    kept = earlier_runs(path.read_text()) if path.exists() else []
    return write_atomic(path, "\n".join([new, *kept[:EARLIER_KEPT]]).encode())


class _Tee(io.TextIOBase):
    """A stdout that also keeps what was written to it through `print` (what a child process
    writes to the inherited descriptor is not kept: the benchmarks capture their children's)."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream, self.parts = stream, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()


@contextlib.contextmanager
def recorded(
    name: str,
    *,
    out: str | os.PathLike[str] | None = None,
    pairs: str | None = None,
    notes: Sequence[str] = (),
) -> Iterator[Started]:
    """Around a benchmark's measuring and printing: what it prints still goes to stdout, and,
    if the block ends without an exception, is written as the newest run of the results file
    `name` (`write_result`). A run that fails writes nothing."""
    started, tee = Started(), _Tee(sys.stdout)
    sys.stdout = tee
    try:
        yield started
    finally:
        sys.stdout = tee.stream
    path = write_result(name, "".join(tee.parts).splitlines(), started=started, out=out,
                        pairs=pairs, notes=notes)  # fmt: skip
    print(f"(recorded in {path})", file=sys.stderr)
