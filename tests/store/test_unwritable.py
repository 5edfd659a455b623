"""A store this process may not write (a read-only file system, a folder without permission)
is refused in one line naming the store, at open and at any later write (soma.store.folder:
`unwritable`, `FolderStore.check_writable`), never a traceback ending in `OSError: [Errno 30]`.

The real thing needs a read-only file system, and chmod does not stop root: the processes
run in a mount namespace of their own (`unshare -m`, or `-rm` for a user without the right),
where the folder is an empty tmpfs mounted read-only or a store bind-mounted read-only over
itself; nothing outside the namespace sees either. Skipped, saying why, where neither works.
The in-process tests plant the error the kernel gives (EACCES, EROFS) where the store meets it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import refused, snakemake_command

from soma.store import Store, UnwritableStore
from soma.store.errors import BadStore
from soma.store.folder import store as folder

# --- in this process: the error where the store meets it ----------------------------------------


def refusing_create(code: int):
    """A `create_new` that fails as the kernel does where the store may not write."""

    def create_new(path, mode=None):
        raise OSError(code, os.strerror(code), str(path))

    return create_new


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.EPERM])
def test_a_write_the_file_system_refuses_is_one_line_naming_the_store(
    tmp_path, monkeypatch, code
) -> None:
    store = Store(tmp_path / "s")
    digest = store.put(b"before")
    monkeypatch.setattr(folder, "create_new", refusing_create(code))
    for write in (
        lambda: store.put(b"new bytes"),
        lambda: store.keep("a/b", {"x": 1}),
        lambda: store.bind("a/c", digest),
        lambda: store.claim("a/d", digest),
    ):
        with pytest.raises(UnwritableStore) as raised:
            write()
        said = str(raised.value)
        assert "\n" not in said and said.startswith(f"store {store.directory}"), said
        assert f"{store.directory}/tmp/" in said, said  # the very path refused
        if code == errno.EROFS:
            assert "is on a read-only file system" in said and "mount it read-write" in said
        else:
            assert "may not write" in said and "write permission" in said, said
        assert isinstance(raised.value, OSError)  # what it replaces was one
    assert store.get(digest) == b"before"


def test_a_group_commit_the_file_system_refuses_is_one_line_too(tmp_path, monkeypatch) -> None:
    store = Store(tmp_path / "s")
    digest = store.put(b"x")

    def rename(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", "names/a")

    with pytest.raises(UnwritableStore, match=r"is on a read-only file system \(writing names/a"):
        with store.group():
            store.bind("a", digest)
            monkeypatch.setattr(folder.os, "rename", rename)


def test_a_refusal_not_about_writing_goes_through_as_it_was(tmp_path, monkeypatch) -> None:
    """A full disk is not a permission: the store says it as before (soma.store.patience)."""
    store = Store(tmp_path / "s")
    monkeypatch.setattr(folder, "create_new", refusing_create(errno.ENOSPC))
    with pytest.raises(OSError) as raised:
        store.put(b"new bytes")
    assert raised.value.errno == errno.ENOSPC and not isinstance(raised.value, UnwritableStore)


def test_a_store_this_process_may_not_write_is_refused_when_a_run_opens_it(
    tmp_path, monkeypatch
) -> None:
    """Every process that runs a round opens its store through open_store, which asks;
    a reader does not (a store it may only read is read)."""
    from soma.config.stores import open_store
    from soma.errors import SomaError

    Store(tmp_path / "s")
    real = folder.os.access
    monkeypatch.setattr(
        folder.os, "access", lambda path, mode: not str(path).endswith("names") and real(path, mode)
    )
    with pytest.raises(UnwritableStore, match=r"may not write .*/s/names \(Permission denied\)"):
        open_store(tmp_path / "s", "durable", "durability", SomaError)
    assert Store(tmp_path / "s").bound() == []  # the reader's open


def test_a_store_folder_that_cannot_be_made_is_refused_naming_it(tmp_path, monkeypatch) -> None:
    def mkdir(self, mode=0o777, parents=False, exist_ok=False):
        raise OSError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(folder.Path, "mkdir", mkdir)
    said = rf"store {re.escape(str(tmp_path))}/s: .* may not write {re.escape(str(tmp_path))}/s "
    with pytest.raises(UnwritableStore, match=said):
        Store(tmp_path / "s")

    def full(self, mode=0o777, parents=False, exist_ok=False):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(folder.Path, "mkdir", full)
    said = rf"store folder {re.escape(str(tmp_path))}/s cannot be made: No space left"
    with pytest.raises(BadStore, match=said):
        Store(tmp_path / "s")


# --- a real read-only file system, in a mount namespace of its own -----------------------------


@pytest.fixture(scope="module")
def unshare(tmp_path_factory) -> list[str]:
    """The `unshare` command that gives a process a mount namespace where it may mount."""
    if shutil.which("unshare") is None:
        pytest.skip("no `unshare` (util-linux): a read-only mount needs a namespace of its own")
    probe = tmp_path_factory.mktemp("probe")
    script = 'mount -t tmpfs -o ro tmpfs "$0" && ! touch "$0/x" 2>/dev/null'
    for command in (["unshare", "-m"], ["unshare", "-rm"]):
        done = subprocess.run([*command, "sh", "-c", script, str(probe)], capture_output=True)
        if done.returncode == 0:
            return command
    pytest.skip(f"cannot mount a read-only tmpfs in a mount namespace: {done.stderr!r}")


def read_only(unshare: list[str], where: Path, *command: str, bind: bool = False):
    """`command` run where `where` is read-only: an empty tmpfs mounted read-only there, or
    (`bind`) the folder itself bind-mounted read-only over itself."""
    mount = (
        'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0"'
        if bind
        else 'mount -t tmpfs -o ro tmpfs "$0"'
    )
    return subprocess.run(
        [*unshare, "sh", "-c", f'{mount} && exec "$@"', str(where), *command],
        capture_output=True,
        text=True,
        timeout=600,
    )


def soma_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "soma.cli", *args]


SIMULATE = ("simulate", "--rounds", "1", "--clients", "2", "--option", "examples=32")


@pytest.mark.slow
def test_soma_simulate_on_a_read_only_file_system_is_refused_in_one_line(unshare, tmp_path) -> None:
    (tmp_path / "ro").mkdir()
    store = tmp_path / "ro" / "store"
    done = read_only(unshare, tmp_path / "ro", *soma_command(*SIMULATE, "--store", str(store)))
    line = refused(done)
    assert line == (
        f"soma: store {store} is on a read-only file system: mount it read-write, or give a "
        "store folder on a writable one"
    ), line


@pytest.mark.slow
def test_a_read_only_store_is_refused_to_a_run_and_read_by_a_reader(unshare, tmp_path) -> None:
    """An existing store mounted read-only: `soma simulate` refuses it at open, in one line
    and before training; `soma status` reads it; a write of a library user that opened it
    as a reader is refused in one line too."""
    store = tmp_path / "store"
    made = subprocess.run(
        soma_command(*SIMULATE, "--store", str(store), "--run", "a"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr
    run = read_only(unshare, store, *soma_command(*SIMULATE, "--store", str(store)), bind=True)
    assert refused(run) == (
        f"soma: store {store} is on a read-only file system: mount it read-write, or give a "
        "store folder on a writable one"
    )
    assert "round 0" not in run.stderr + run.stdout  # refused before any training
    status = read_only(
        unshare, store, *soma_command("status", "--store", str(store), "--run", "a"), bind=True
    )
    assert status.returncode == 0 and status.stdout.startswith("round    0: 2/2"), status
    code = (
        "import sys\nfrom soma.store import Store, UnwritableStore\n"
        "try:\n    Store(sys.argv[1]).keep('x', {'a': 1})\n"
        "except UnwritableStore as error:\n    print(error)\n"
    )
    kept = read_only(unshare, store, sys.executable, "-c", code, str(store), bind=True)
    assert kept.stdout.startswith(
        f"store {store} is on a read-only file system (writing {store}/tmp/"
    ), kept


@pytest.mark.workflow
def test_the_workflow_refuses_a_read_only_store_in_one_line(unshare, tmp_path) -> None:
    """The Snakefile checks the store when it is read (soma.config.stores), before any job:
    snakemake's output says the refusal, naming the store, and no `Errno 30`. The start
    job's own refusal is this file's in-process tests'."""
    (tmp_path / "ro").mkdir()
    store = tmp_path / "ro" / "store"
    command = snakemake_command(tmp_path / "w", "--cores", "1", "--config", f"store={store}")
    done = read_only(unshare, tmp_path / "ro", *command)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    said = f"store {store} is on a read-only file system: mount it read-write"
    assert said in out and "Errno 30" not in out, out[-3000:]
    assert f"config key `store`: {said}" in out, "refused when the Snakefile is read"
    assert not (tmp_path / "w" / "logs").exists(), "no job ran"
