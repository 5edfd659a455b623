"""A store imports torch only when a tensor is encoded or decoded (issue 50, item 5): opening a
store, resolving and listing names, keeping and reading JSON records and claiming never do, so
that `soma status` and the other commands that only read records start without it.

Each check runs in a fresh interpreter (torch, once imported, stays imported), on a store
made here beforehand with a tensor value in it, so that a tensor blob is there to be avoided.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from soma.store import Store

TESTS = Path(__file__).resolve().parents[1]

# what the fresh interpreter does, then says whether torch was imported (and by what)
TOUCH_NO_TENSOR = """
import os, sys
if os.environ.get("SOMA_MUTANT"):  # the test's mutant, applied first (tests/mutants.py)
    sys.path.insert(0, sys.argv[2])
    import mutants
    mutants.apply_from_environment()
import soma.store
from soma.store import Store

store = Store(sys.argv[1])
digest = store.resolve("run/record")
assert store.recall("run/record") == {"round": 3, "clients": [0, 1], "loss": 0.25}
assert store.recall_digest(digest) == store.recall("run/record")
assert store.get_record(digest)
assert store.bound("run/") == ["run/record", "run/weights"]
assert store.entries("run") == ["record", "weights"]
assert store.resolve("run/weights") is not None and store.has(store.resolve("run/weights"))
fresh = store.keep("run/next", {"round": 4, "note": "no tensor here", "nan": float("nan")})
assert store.claim("run/claimed", fresh) and not store.claim("run/claimed", fresh)
store.bind("run/bound", fresh)
assert store.forget("run/bound")
with store.group():
    store.keep("run/grouped", [1, 2, 3])
print("torch" in sys.modules)
"""

TOUCH_TENSOR = """
import sys
from soma.store import Store

weights = Store(sys.argv[1]).recall("run/weights")
print("torch" in sys.modules, type(weights["w"]).__name__)
"""


def _run(script: str, store: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(store), str(TESTS)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _made(tmp_path: Path) -> Path:
    """A folder store holding a JSON record and a tensor value, made in this process."""
    store = Store(tmp_path / "store")
    store.keep("run/record", {"round": 3, "clients": [0, 1], "loss": 0.25})
    store.keep("run/weights", {"w": torch.ones(4), "b": torch.zeros(2)})
    return tmp_path / "store"


def test_opening_a_store_and_reading_and_writing_records_and_names_imports_no_torch(
    tmp_path: Path,
) -> None:
    assert _run(TOUCH_NO_TENSOR, _made(tmp_path)) == "False"


def test_recalling_a_tensor_imports_torch_then_and_gives_a_tensor(tmp_path: Path) -> None:
    assert _run(TOUCH_TENSOR, _made(tmp_path)) == "True Tensor"
