"""`soma simulate --buffer` and `soma client --buffer` as a user types them: the JSON lines,
the stop conditions, and refusals in one line before anything is written."""

from __future__ import annotations

import json

from helpers import refused, soma

SIMULATE = [
    "simulate",
    "--clients",
    "4",
    "--rounds",
    "6",
    "--buffer",
    "2",
    "--option",
    "examples=64",
]


def _lines(result) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_simulate_with_a_buffer_says_each_version_on_the_simulated_clock(tmp_path) -> None:
    lines = _lines(soma(*SIMULATE, "--store", str(tmp_path), "--straggling", "1.5"))
    versions, done = lines[:-1], lines[-1]
    assert [line["version"] for line in versions] == list(range(7))
    assert [line["time"] for line in versions] == sorted(line["time"] for line in versions)
    assert all(len(line["staleness"]) == 2 for line in versions[1:])
    assert done["stopped"] == "6 versions" and "loss" in done["evaluation"]
    assert sum(done["staleness"].values()) == 12  # how many updates were how stale
    shown = soma("status", "--store", str(tmp_path), "--run", "simulation")
    assert shown.returncode == 0 and "version    6" in shown.stdout
    assert soma("audit", "--store", str(tmp_path), "--run", "simulation").returncode == 0
    model = tmp_path / "model.safetensors"
    run = ["export", "--store", str(tmp_path), "--run", "simulation", "-o", str(model)]
    exported = soma(*run, "--round", "3")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith(f"{model}: version 3 of run 'simulation', weights")
    from soma.model import read_metadata

    assert read_metadata(model)["version"] == "3"
    assert "versions 0..6, not version 9" in refused(soma(*run, "--round", "9"))


def test_simulate_stops_at_its_deadline_or_its_target() -> None:
    early = _lines(soma(*SIMULATE, "--until", "0.5"))[-1]
    assert early["stopped"] == "deadline 0.5s" and early["versions"] < 6
    reached = _lines(soma(*SIMULATE, "--target", "loss=1000"))[-1]
    assert reached["stopped"] == "target loss 1000" and reached["versions"] == 0


def test_simulate_times_its_clients_by_a_slurm_accounting_trace(tmp_path) -> None:
    trace = tmp_path / "sacct.txt"
    trace.write_text(
        "2026-01-01T10:00:00|2026-01-01T10:00:02|2026-01-01T10:00:05\n"  # queued 2, ran 3
        "2026-01-01T10:00:00|Unknown|Unknown\n"  # never ran: skipped
        "2026-01-01T10:00:00|2026-01-01T10:00:01|2026-01-01T10:00:11\n"  # queued 1, ran 10
    )
    lines = _lines(soma(*SIMULATE, "--clients", "2", "--trace", str(trace)))
    # client 0: jobs 0, 2, 4... (3 s), client 1: jobs 1, 3... (10 s); a version every two updates
    assert [line["time"] for line in lines[:3]] == [0.0, 11.0, 21.0]
    (tmp_path / "bad.txt").write_text("yesterday|today|tomorrow\n")
    said = refused(soma(*SIMULATE, "--trace", str(tmp_path / "bad.txt")))
    assert "bad.txt, line 1: 'yesterday|today|tomorrow' is not Submit|Start|End" in said


def test_an_asynchronous_client_says_each_update_it_contributes(tmp_path) -> None:
    args = ["client", "--store", str(tmp_path), "--run", "a", "--clients", "2", "--rounds", "2"]
    lines = _lines(soma(*args, "--mine", "0-1", "--buffer", "2", "--option", "examples=64"))
    assert [(line["client"], line["from"]) for line in lines[:-1]] == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
    ]
    assert lines[-1]["versions"] == 2


def test_what_an_asynchronous_run_cannot_do_is_refused_in_one_line(tmp_path) -> None:
    said = refused(soma(*SIMULATE, "--store", str(tmp_path), "--secure-aggregation", "2"))
    assert "--buffer: asynchronous rounds cannot be summed securely" in said
    assert list(tmp_path.iterdir()) == []
    said = refused(soma(*SIMULATE, "--target", "accuracy"))
    assert "--target must be METRIC=VALUE" in said
