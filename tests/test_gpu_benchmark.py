"""benchmarks/gpu.py, the checks that need a GPU: its --dry mode on the CPU in the suite, and
the real thing where torch sees a GPU (marked `gpu`, skipped with the reason elsewhere)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def benchmark():
    spec = importlib.util.spec_from_file_location("gpu_benchmark", ROOT / "benchmarks" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def checks(lines: list[str]) -> list[str]:
    """The lines that state a check (`...: True` or `...: False`)."""
    return [line for line in lines if line.endswith((": True", ": False"))]


@pytest.mark.slow  # trains for seconds: three soma.simulate runs and a timed loop
def test_the_dry_mode_runs_every_check_on_the_cpu_and_writes_its_table(tmp_path):
    lines = benchmark().main(["--dry", "--rounds", "1", "--steps", "2", "--out", str(tmp_path)])
    written = (tmp_path / "gpu.md").read_text()  # the results file, as benchmarks/results/'s
    assert "````text\n" + "\n".join(lines) + "\n````" in written and "A --dry run" in written
    assert "| command | `python benchmarks/gpu.py --dry " in written
    said = "\n".join(lines)
    assert "the CPU (--dry)" in said and "peak GPU memory of one client's training: n/a" in said
    assert [line.split(":")[0] for line in lines if line.startswith("precision")] == [
        "precision fp32",
        "precision bf16",
    ]
    for check in ("trained twice, the same bits: True", "every export on the CPU: True",
                  "the clients trained by hand there: True"):  # fmt: skip
        assert check in said, said
    assert not torch.are_deterministic_algorithms_enabled()  # left as it found them


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: torch sees no CUDA device")
def test_on_a_gpu_the_exports_average_to_the_same_bits_and_every_precision_trains(tmp_path):
    lines = benchmark().main(["--rounds", "1", "--steps", "5", "--out", str(tmp_path / "g")])
    averaged = [line for line in checks(lines) if line.startswith("average")]
    assert len(averaged) == 2 and all(line.endswith("True") for line in averaged), lines
    assert all("every export on the CPU: True" in line for line in lines if "bits" in line)
    assert len([line for line in lines if line.startswith("precision")]) == 3
