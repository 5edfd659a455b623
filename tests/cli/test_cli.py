"""The `soma` command's own manners (soma.cli): a stdout closed by its reader ends a command
quietly, `soma --help` lists the subcommands without a default they do not have, a command
on a bucket does not print boto's credential lines, and `--task` says what its default is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import soma

from soma.cli import CLOSED_STDOUT, parser

# --- --help ------------------------------------------------------------------------------------


def test_soma_help_lists_the_subcommands_without_a_default() -> None:
    shown = parser().format_help()
    assert "default" not in shown, shown
    for command in ("client", "simulate", "status", "export", "verify", "gc"):
        assert f"\n    {command} " in shown, shown


def test_the_task_option_says_its_default_and_the_workflows() -> None:
    commands = parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ("simulate", "client"):
        shown = " ".join(commands[name].format_help().split())
        assert "(default: soma.tasks.control, a toy task" in shown, shown
        assert "the workflow's default, and the README's results, are --task soma.tasks.digits" in (
            shown
        )


# --- a closed stdout ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_store(tmp_path_factory) -> Path:
    """A store holding run `a` of the control task (2 clients, 3 rounds)."""
    import soma

    store = tmp_path_factory.mktemp("piped") / "store"
    soma.simulate(
        "soma.tasks.control",
        clients=2,
        rounds=3,
        task_options={"examples": 32},
        store=store,
        run="a",
    )
    return store


def closed_pipe_run(*args: str) -> subprocess.CompletedProcess:
    """`soma ARGS` writing into a pipe whose reader is gone before it starts: its first write
    to stdout fails (EPIPE), whenever it comes."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "soma.cli", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("status", "--run", "a"),
        ("status", "--run", "a", "--json"),
        ("verify",),
        ("gc", "--dry-run"),
    ],
    ids=lambda args: " ".join(args),
)
def test_a_command_whose_reader_is_gone_exits_quietly(run_store, args) -> None:
    done = closed_pipe_run(args[0], "--store", str(run_store), *args[1:])
    assert done.returncode == CLOSED_STDOUT == 141, done.stderr
    assert done.stderr == "", done.stderr  # no traceback, no "Exception ignored" either


@pytest.mark.slow
def test_soma_status_into_head_exits_cleanly(run_store) -> None:
    """The user's pipe, a real one: `soma status ... | head -1` prints the first round, and
    soma says nothing on stderr whichever of the two finishes first."""
    done = subprocess.run(
        [
            "bash",
            "-c",
            'set -o pipefail; "$0" -m soma.cli status --store "$1" --run a | head -1',
            sys.executable,
            str(run_store),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.startswith("round    0: 2/2 written") and done.stdout.count("\n") == 1
    assert done.stderr == "", done.stderr
    assert done.returncode in (0, CLOSED_STDOUT), done


# --- a bucket ----------------------------------------------------------------------------------


def test_a_command_on_a_bucket_prints_no_credential_lines_but_its_own(bucket) -> None:
    """boto's "Found credentials in environment variables." is silenced (its loggers at
    WARNING), soma's own INFO lines (a round's evaluation) are not."""
    from s3_bucket import BUCKET

    store = f"s3://{BUCKET}/cli-quiet"
    done = soma(
        "simulate", "--store", store, "--rounds", "1", "--clients", "2", "--option", "examples=32"
    )
    assert done.returncode == 0, done.stderr
    assert "credentials" not in done.stderr.lower(), done.stderr
    assert "round 0/0: loss" in done.stderr, done.stderr
    status = soma("status", "--store", store, "--run", "simulation")
    assert status.returncode == 0 and status.stderr == "", status.stderr
