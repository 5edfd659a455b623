"""The server's arithmetic gives the same bits under every CPU capability torch can pick.

torch dispatches its kernels by the CPU (`ATEN_CPU_CAPABILITY`: default, avx2, avx512); a
fused `lerp` or `add(..., alpha=)` rounds once on one and twice on another. soma's trust
rests on recomputation (`verify_averages: recompute`, `soma audit`), so an average computed
on one machine must recompute to the same digest on any other. These tests run the server's
arithmetic in processes started under each capability this machine has (the nearest thing
to another machine a single host offers) and compare:

- every built-in strategy (two steps, the second from the first's state), the tree, an
  asynchronous version, on fixed inputs made by numpy (tests/capability_worker.py), with a
  control showing that torch's fused kernels really round differently here;
- a run made under one capability audits clean under the other, both ways, synchronous and
  asynchronous (the issue's reproduction: `soma simulate` then `soma audit`).

Client training is not recomputed by anyone and may differ by capability; it is not compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
WORKER = TESTS / "capability_worker.py"
ROUND_WORKER = TESTS / "round_worker.py"

pytestmark = pytest.mark.slow  # each case starts processes


def _env(capability: str | None) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("ATEN_CPU_CAPABILITY", None)
    env.pop("SLURM_PROCID", None)
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability
    return env


def _worker(capability: str | None, folder: Path) -> dict:
    result = subprocess.run(
        [sys.executable, str(WORKER), str(folder)],
        env=_env(capability),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@cache
def _native() -> str:
    """The capability torch picks on this machine by itself (lower case, as the variable
    takes it)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(None), capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().lower()


def _others() -> list[str]:
    """The capabilities to compare against `default`: the native one and those below it."""
    native = _native()
    if native == "default":
        pytest.skip("this CPU gives torch no SIMD capability beyond default: nothing to compare")
    return [c for c in ("avx2", "avx512") if c == native or (native == "avx512" and c == "avx2")]


def test_every_strategy_averages_to_the_same_bits_under_every_capability(tmp_path):
    baseline = _worker("default", tmp_path / "default")
    assert baseline["capability"] == "DEFAULT"
    for capability in _others():
        other = _worker(capability, tmp_path / capability)
        assert other["capability"] == capability.upper()
        # the control: torch's own fused kernels give other bits here, so the comparison
        # below is between arithmetic that could differ
        assert other["control"] != baseline["control"], (
            f"torch.lerp gives the same bits under default and {capability} on this machine"
        )
        differ = [
            case
            for case, digest in baseline["digests"].items()
            if other["digests"].get(case) != digest
        ]
        assert not differ, f"under {capability}, not the bits of default: {differ}"
        assert set(other["digests"]) == set(baseline["digests"])


def _soma(capability: str | None, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`soma ARGS` under `capability`, with the test's mutant (tests/round_worker.py)."""
    return subprocess.run(
        [sys.executable, str(ROUND_WORKER), *args],
        env=_env(capability),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["rounds", "versions"])
def test_a_run_made_under_one_capability_audits_clean_under_another(tmp_path, asynchronous):
    """The issue's reproduction, both ways: made under `default`, audited under the native
    capability, and made under the native one, audited under `default`."""
    native = _others()[-1]
    flags = ["--buffer", "2"] if asynchronous else []
    for made, audited in (("default", native), (native, "default")):
        store = f"store-{made}"
        run = _soma(
            made,
            "simulate",
            "--task",
            "soma.tasks.digits",
            "--clients",
            "5",
            "--rounds",
            "2",
            *flags,
            "--store",
            store,
            "--run",
            "r",
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr
        audit = _soma(audited, "audit", "--store", store, "--run", "r", cwd=tmp_path)
        assert audit.returncode == 0, (
            f"made under {made}, audited under {audited}:\n{audit.stdout}\n{audit.stderr}"
        )
        assert "every check held" in audit.stdout
        if not asynchronous:  # each average says where it was computed, and recomputed
            assert "computed under torch" in audit.stdout
            assert f"{made.upper()}; recomputed under" in audit.stdout, audit.stdout
            assert f"CPU capability {audited.upper()}" in audit.stdout, audit.stdout
