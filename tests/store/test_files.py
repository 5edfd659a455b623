"""The one atomic writer (soma.files.write_atomic): whole or nothing under the final name, and
modes said on purpose (a receipt as the umask says, a secret 0600 whatever the umask)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from soma.config.secrets import FILE_MODE as PRIVATE
from soma.files import write_atomic
from soma.workflow import read_receipt, write_receipt

HERE = Path(__file__).resolve().parents[1]


@pytest.fixture
def umask():
    """Set the process's umask for one test, and put it back."""
    before = os.umask(0o022)
    os.umask(before)
    yield lambda mask: os.umask(mask)
    os.umask(before)


def test_a_receipt_is_as_the_umask_says_not_0600(tmp_path, umask) -> None:
    umask(0o022)
    path = tmp_path / "results/run/round/0/average.json"
    write_receipt(path, {"round": 0})
    assert path.stat().st_mode & 0o777 == 0o644
    assert read_receipt(path) == {"round": 0}
    assert os.listdir(path.parent) == ["average.json"], "no temporary left beside it"


def test_a_secret_is_0600_whatever_the_umask(tmp_path, umask) -> None:
    umask(0o000)
    secret, plain = tmp_path / "client/0.json", tmp_path / "client/0.receipt.json"
    write_receipt(secret, {"seed": "s"}, mode=PRIVATE)
    write_receipt(plain, {"round": 0})
    assert secret.stat().st_mode & 0o777 == 0o600
    assert plain.stat().st_mode & 0o777 == 0o666


def test_a_file_is_replaced_whole_and_chunks_are_written_in_order(tmp_path) -> None:
    path = tmp_path / "f"
    write_atomic(path, b"old")
    write_atomic(path, [memoryview(b"ne"), memoryview(b"w")])
    assert path.read_bytes() == b"new"


def test_a_missing_folder_is_refused_and_nothing_is_made(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "no/f", b"x")
    assert os.listdir(tmp_path) == []


KILLED_WRITER = """
import sys, time
sys.path.insert(0, sys.argv[2])
import mutants
mutants.apply_from_environment()
import soma.files
from soma.workflow import write_receipt
write = soma.files.write_all
def slowly(fd, chunk):
    write(fd, chunk)
    print("wrote", flush=True)
    time.sleep(600)
soma.files.write_all = slowly
write_receipt(sys.argv[1], {"round": 1, "weights": "new"})
"""


def test_a_receipt_writer_killed_mid_write_leaves_the_old_one(tmp_path) -> None:
    path = tmp_path / "average.json"
    write_receipt(path, {"round": 0, "weights": "old"})
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path), str(HERE)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline() == "wrote\n"
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    assert json.loads(path.read_text()) == {"round": 0, "weights": "old"}
