"""A run says how it goes while it goes, every job logs what it did, and the summary's table,
plot and report agree on the rounds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import NO_BASELINES, TINY, ok, snakemake

from soma import workflow
from soma.round import evaluation_name
from soma.store import Store
from soma.workflow import report


@pytest.fixture(scope="module")
def watched(tiny_run) -> tuple[Path, str]:
    """One tiny run (2 clients, 2 rounds, both baselines) and what snakemake printed."""
    return tiny_run  # the session's (tests/tiny_run.py), shared with test_workflow, test_model


def test_each_round_shows_its_metric_in_snakemakes_output_as_it_goes(watched) -> None:
    workdir, out = watched
    lines = re.findall(r"^(start|round \d+/\d+): accuracy (\d\.\d{3})$", out, flags=re.M)
    assert [what for what, _ in lines] == ["start", "round 0/1", "round 1/1"], out[-3000:]
    results = workdir / "results" / "tiny"
    for r in range(2):
        receipt = json.loads((results / "round" / str(r) / "evaluation.json").read_text())
        assert (f"round {r}/1", f"{receipt['metrics']['accuracy']:.3f}") in lines
        log = (workdir / "logs" / "tiny" / "round" / str(r) / "evaluation.log").read_text()
        assert f"round {r}/1: accuracy {receipt['metrics']['accuracy']:.3f}" in log
    # shown while the run goes: each round's line before the summary job starts
    assert out.index("round 1/1: accuracy") < out.index("rule summary:")


def test_no_log_file_is_empty_and_each_says_what_its_job_did(watched) -> None:
    workdir, _ = watched
    logs = workdir / "logs" / "tiny"
    files = sorted(logs.rglob("*.log"))
    jobs = {str(p.relative_to(logs)) for p in files}
    every = {"start", "summary", "centralized", "alone/0", "alone/1"}
    every |= {f"round/{r}/{job}" for r in range(2) for job in ("average", "evaluation")}
    every |= {f"round/{r}/client/{k}" for r in range(2) for k in range(2)}
    assert {f"{job}.log" for job in every} <= jobs
    assert all(p.stat().st_size > 0 for p in files), [p for p in files if not p.stat().st_size]
    for p in files:
        assert re.search(r"INFO soma\.workflow: done in \d+\.\d\d s$", p.read_text().strip()), p
    results = workdir / "results" / "tiny"
    receipt = json.loads((results / "round" / "1" / "client" / "0.json").read_text())
    train = (logs / "round" / "1" / "client" / "0.log").read_text()
    for said in (
        "round 1 of run 'tiny', client 0",
        f"trained on {receipt['size']} examples",
        f"from weights {receipt['started_from']}",
        f"loss {receipt['metrics']['loss']:.3f}",
        f"steps {receipt['metrics']['steps']}",
        f"sent weights {receipt['weights']} to the store as tiny/round/1/",
        f"/{receipt['meeting']}/client/0",
    ):
        assert said in train, (said, train)
    average = json.loads((results / "round" / "1" / "average.json").read_text())
    log = (logs / "round" / "1" / "average.log").read_text()
    assert "fedavg of clients 0, 1" in log and f"averaged weights {average['weights']}" in log
    start = json.loads((results / "start.json").read_text())
    assert f"weights {start['weights']}" in (logs / "start.log").read_text()
    assert "client 1 alone, round 1" in (logs / "alone" / "1.log").read_text()
    assert "centralized, round 1" in (logs / "centralized.log").read_text()
    assert "wrote results/tiny/summary.tsv" in (logs / "summary.log").read_text()


def test_each_evaluation_is_kept_in_the_store_by_its_weights(watched) -> None:
    workdir, _ = watched
    store = Store(workdir / "store")
    results = workdir / "results" / "tiny"
    receipts = [results / "start.json"] + [
        results / "round" / str(r) / "evaluation.json" for r in range(2)
    ]
    for path in receipts:
        receipt = json.loads(path.read_text())
        kept = store.recall(f"tiny/evaluation/{receipt['weights']}")
        assert kept == {"metrics": receipt["metrics"], "weights": receipt["weights"]}, path
        assert (
            evaluation_name("tiny", receipt["weights"]) == f"tiny/evaluation/{receipt['weights']}"
        )


def test_the_table_starts_from_the_starting_weights_and_the_page_shows_it(watched) -> None:
    workdir, _ = watched
    results = workdir / "results" / "tiny"
    lines = (results / "summary.tsv").read_text().splitlines()
    rows = [line.split("\t") for line in lines]
    assert [row[1] for row in rows] == ["round", "start", "0", "1"]
    start = json.loads((results / "start.json").read_text())["metrics"]["accuracy"]
    # the test metric's columns (federated, alone, alone_best, centralized); the clients'
    # validation columns (soma.run.evaluation) begin at round 0: empty at the start
    assert rows[1][2:6] == [f"{start:.4f}"] * 4, "every column starts from the same weights"
    assert rows[0][6] == "validation" and rows[1][6] == "" and rows[2][6] not in ("", "nan")
    page = (results / "summary.html").read_text()
    cells = re.findall(r"<t[hd]>([^<]*)</t[hd]>", page)
    assert cells == [cell for row in rows for cell in row], "the page is the TSV, as a table"
    assert (results / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failing_job_logs_its_traceback_and_still_fails(tmp_path) -> None:
    path = tmp_path / "logs" / "job.log"
    with pytest.raises(ZeroDivisionError), workflow.logged(str(path)):
        workflow.LOG.info("about to fail")
        print("a task's own print")
        1 / 0  # noqa: B018
    text = path.read_text()
    assert "about to fail" in text and "a task's own print" in text
    assert "ERROR soma.workflow: failed after" in text and "ZeroDivisionError" in text
    assert "Traceback (most recent call last)" in text


def test_progress_lines_go_to_stderr_too_and_the_rest_only_to_the_log(tmp_path, capfd) -> None:
    path = tmp_path / "job.log"
    with workflow.logged(str(path)):
        workflow.LOG.info("only in the log")
        workflow.progress("round %d/%d: accuracy %s", 3, 9, "0.936")
    err = capfd.readouterr().err
    assert err == "round 3/9: accuracy 0.936\n"
    text = path.read_text()
    assert "only in the log" in text and "round 3/9: accuracy 0.936" in text


# --- the plot ---------------------------------------------------------------------------------


def rows(*columns: str, rounds: int = 3) -> list[dict]:
    """Rows as summary_rows makes them: the start, then rounds 0.."""
    made = []
    for r in [report.START, *range(rounds)]:
        x = 0.1 if r == report.START else 0.5 + 0.1 * r
        made.append({"strategy": "fedavg", "round": r, **{c: x for c in columns}})
    return made


def columns_of(made: list[dict]) -> list[str]:
    return [c for c in report.COLUMNS if any(c in row for row in made)]


def test_the_plot_is_on_the_tables_rounds_with_integer_ticks_and_the_best_client() -> None:
    made = rows("federated", "alone", "alone_best", "centralized", rounds=3)
    columns = columns_of(made)
    figure = report.plotted(made, columns, "accuracy", report.plot_title(made, columns))
    axes = figure.axes[0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["start", "0", "1", "2"]
    assert list(axes.get_xticks()) == [-1, 0, 1, 2]
    labels = [line.get_label() for line in axes.get_lines()]
    assert "alone (best client)" in labels and "alone (mean of clients)" in labels
    for line in axes.get_lines():
        assert list(line.get_xdata()) == [-1, 0, 1, 2], line.get_label()
    assert axes.get_title() == "Federated (fedavg) against each client alone and centralized"


def test_the_title_names_only_the_baselines_there_are() -> None:
    for present, title in (
        ((), "Federated (fedavg)"),
        (("alone", "alone_best"), "Federated (fedavg) against each client alone"),
        (("centralized",), "Federated (fedavg) against centralized"),
    ):
        made = rows("federated", *present)
        assert report.plot_title(made, columns_of(made)) == title


def test_many_rounds_get_few_integer_ticks() -> None:
    ticks = report.round_ticks([report.START, *range(100)])
    assert ticks[0] == -1 and len(ticks) <= 12
    assert all(isinstance(t, int) for t in ticks) and ticks == sorted(ticks)


@pytest.mark.workflow
def test_the_plot_is_named_by_the_metric(tmp_path) -> None:
    """Another metric is another plot (results/<run>/<metric>.png), never a stale one."""
    plan = ok(snakemake(tmp_path, "-n", "--config", "metric=loss", config=[TINY, NO_BASELINES]))
    assert "results/tiny/loss.png" in plan and "results/tiny/accuracy.png" not in plan
