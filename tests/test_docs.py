"""Every command the README, config/README.md and the site's tutorials and how-to guides
(docs/tutorials/, docs/how-to/) tell a user to type, run as a test.

A snakemake command is run as a dry run (`-n`) in a folder laid out like a checkout (the
Snakefile, workflow/, config/ and profiles/ linked in), so that what the docs say is accepted
by the schema and builds its DAG; the runs themselves are tested elsewhere (test_workflow,
test_slurm), and a report needs a finished run (test_workflow's report test). `soma` commands
run for real against a small store. `pip install` and `python -m pytest` are what CI runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import forking
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [
    ROOT / "README.md",
    ROOT / "config" / "README.md",
    *sorted((ROOT / "docs" / "tutorials").glob("*.md")),
    *sorted((ROOT / "docs" / "how-to").glob("*.md")),
]


def documented_commands(text: str) -> list[str]:
    """The commands in a Markdown text: lines of fenced shell blocks, and `code` in prose
    and tables, that start with snakemake (or `R=...; snakemake`) or soma."""
    found: list[str] = []
    for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(line.split())
            if re.match(r"(R=\S+; )?snakemake\b|soma ", line):
                found.append(line)
    for cell in re.findall(r"`((?:snakemake|soma) [^`]*)`", text):
        found.append(" ".join(cell.replace("\\|", "|").split()))
    return list(dict.fromkeys(found))


def snakemake_commands() -> list[str]:
    commands = []
    for doc in DOCS:
        for command in documented_commands(doc.read_text()):
            if "snakemake" not in command or "/path/to/soma" in command:
                continue  # your own task's command runs in test_workflow's README test
            if "--report" in command:
                continue  # needs a finished run: test_workflow's report test
            commands.append(command)
    return list(dict.fromkeys(commands))  # a page may repeat the README's


def checkout(tmp_path: Path) -> Path:
    for name in ("Snakefile", "workflow", "config", "profiles"):
        (tmp_path / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / ".test", tmp_path / ".test")  # the catalogue's tiny run writes there
    # the docs' strategy of your own (`strategy=mypkg.mystrategy`): a dry run only finds it
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "mystrategy.py").write_text("from soma.strategies.fedavg import make\n")
    return tmp_path


def test_the_docs_name_the_commands_a_user_types() -> None:
    commands = snakemake_commands()
    assert any(c.startswith("snakemake --cores 2") for c in commands)
    assert any("--profile profiles/slurm" in c for c in commands)
    assert any(c.startswith("R=3; snakemake") for c in commands)
    assert any("task_options=" in c for c in commands), "config/README's nested override"


def _arguments(command: str, where: Path, name: str = "snakemake") -> list[str]:
    """The arguments bash passes `name` (snakemake, soma) on a documented line: its variables
    (`R=3; ...`), quotes and braces expanded by bash itself, which runs the line with `name` a
    function that prints them."""
    shell = f"{name}() {{ printf '%s\\0' \"$@\"; }}; " + command
    done = subprocess.run(["bash", "-c", shell], cwd=where, capture_output=True, text=True)
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    return done.stdout.split("\0")[:-1]


@pytest.mark.workflow
@pytest.mark.parametrize("command", snakemake_commands())
def test_each_documented_snakemake_command_is_accepted(tmp_path, command) -> None:
    where = checkout(tmp_path)
    if "| dot" in command and shutil.which("dot") is not None:  # the pipe, as typed
        shell = re.sub(r"(^|; )snakemake\b", rf"\g<1>{sys.executable} -m snakemake", command)
        done = subprocess.run(
            ["bash", "-c", shell], cwd=where, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{command}\n{(done.stdout + done.stderr)[-3000:]}"
        return
    # snakemake forked from the suite's fork server (tests/forking.py), as a dry run but for
    # the commands that make no job (a graph of the jobs; unlocking)
    arguments = _arguments(command.split("|")[0], where)
    if not re.search(r"--(dag|rulegraph|unlock)\b", command):
        arguments.append("-n")
    done = forking.snakemake(arguments, cwd=where, timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}"


def _on_a_bucket(command: str) -> bool:
    """A command on a bucket, or the local server's (which stays in the foreground): the
    recipe "Two sites on one machine" runs on a server of its own in
    tests/store/test_local_bucket.py."""
    return "s3://" in command or command.startswith("soma bucket serve")


@pytest.mark.slow
def test_each_documented_soma_command_runs(tmp_path) -> None:
    import torch

    import soma

    export = {"fc": {"weight": torch.ones(2, 2)}}
    pages = {doc: [c for c in documented_commands(doc.read_text()) if _runnable(c)] for doc in DOCS}
    assert any(c.startswith("soma status") for c in pages[DOCS[0]])
    ran: set[str] = set()  # the commands that read and write nothing of their page's folder
    for number, (doc, commands) in enumerate(pages.items()):
        # Each page's commands in order, in a folder of the page's own (a page's `soma keys`
        # makes the keys another page makes too), with the store of a run "digits" to read.
        where = tmp_path / f"page{number}"
        store = soma.Store(where / "store")
        # "Your own task"'s `soma simulate --task mytask`, from the folder that holds it
        shutil.copy(ROOT / "examples" / "mytask.py", where / "mytask.py")
        for r in range(4):
            soma.gather(store, export, run="digits", round=r, clients=1, mine=0, deadline=10)
        for command in commands:
            if command in ran:
                continue  # the README's simulate, again on two pages: the same run, once
            if " --store " not in command and not re.search(r"( -o |>)", command):
                ran.add(command)  # a temporary store, no file made: the same wherever it runs
            # forked from the suite's fork server (tests/forking.py); `> file` as bash does it
            line, _, into = command.partition(" > ")
            done = forking.soma(_arguments(line, where, "soma"), cwd=where, timeout=120)
            assert done.returncode == 0, f"{doc.name}: {command}\n{done.stdout}{done.stderr}"
            if into:
                (where / into).write_text(done.stdout)


def _runnable(command: str) -> bool:
    """A `soma` command this test can run here: not a bucket's, not one on a cluster's
    shared folder, nor one that needs the shell's variables."""
    return (
        command.startswith("soma ")
        and " --" in command
        and "/shared/" not in command
        and "$" not in command
        and not _on_a_bucket(command)
    )
