"""What a fault of the store does to a round (soma.run.step's rule): it is never a client's
drop-out. Real `soma client` processes, one a client as srun starts them, on a real folder;
the fault is planted in one of them (tests/fault_worker.py) as a full disk or a failing
file server would put it there.

Either the store's patience rides the fault through and the run ends with the fault-free
model bit for bit, or every process exits non-zero naming the store's error: never exit 0
with another model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from figures import FIGURES, printed

from soma.round import status
from soma.store import Store

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parents[1]
CLIENTS = 4


def clients(store: Path, *, plant: str | None = None, faulty: int = 3) -> list:
    """`soma client` for each of 4 digits clients (quorum 3, FedAdam, 2 rounds), all at
    once, with `plant` (SOMA_PLANT) in client `faulty`'s process; each one's return code,
    stdout and stderr."""
    args = ["client", "--store", str(store), "--run", "f", "--rounds", "2"]
    args += ["--clients", str(CLIENTS), "--task", "soma.tasks.digits", "--quorum", "3"]
    args += ["--strategy", "fedadam", "--deadline", "60"]
    for option in ("labels_per_client=5", "model=softmax", "epochs=1"):
        args += ["--option", option]
    running = []
    for k in range(CLIENTS):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop("SOMA_PLANT", None)
        if plant is not None and k == faulty:
            env["SOMA_PLANT"] = plant
        command = [sys.executable, str(TESTS / "fault_worker.py"), *args, "--mine", str(k)]
        running.append(
            subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
        )
    done = []
    for process in running:
        out, err = process.communicate(timeout=600)
        done.append((process.returncode, out, err))
    return done


def final_weights(store: Path) -> str:
    """The digest of the weights the run's last round published."""
    return status(Store(store), "f")[-1]["weights"]


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    yield
    printed(request, ["EIO x3 at a claim (quorum)", "ENOSPC at a claim (quorum)"])


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory) -> str:
    store = tmp_path_factory.mktemp("fault-free") / "store"
    for code, _, err in clients(store):
        assert code == 0, err
    return final_weights(store)


def test_a_folder_failing_over_at_one_clients_claim_is_ridden_through_to_the_same_model(
    tmp_path, fault_free
) -> None:
    store = tmp_path / "store"
    figures = FIGURES["EIO x3 at a claim (quorum)"]
    figures["trials"] += 1
    figures["faults"] += 3
    for code, _, err in clients(store, plant="EIO:/client/3:3"):
        assert code == 0, err
    figures["different"] += final_weights(store) != fault_free
    figures["ridden through"] += final_weights(store) == fault_free
    assert final_weights(store) == fault_free
    rounds = status(Store(store), "f")
    assert [r["written"] for r in rounds] == [[0, 1, 2, 3]] * 2, rounds


def test_a_full_disk_at_one_clients_claim_fails_every_process_naming_it(tmp_path) -> None:
    store = tmp_path / "store"
    done = clients(store, plant="ENOSPC:/client/3:0")
    figures = FIGURES["ENOSPC at a claim (quorum)"]
    figures["trials"] += 1
    figures["faults"] += 1
    figures["different"] += any(code == 0 for code, _, _ in done)
    figures["detected"] += all(code != 0 and "No space left" in err for code, _, err in done)
    for k, (code, _, err) in enumerate(done):
        said = err.strip().splitlines()[-1] if err.strip() else ""
        assert code != 0, f"client {k} exited 0 with a round averaged around a broken store"
        assert said.startswith("soma: "), err[-2000:]
        assert "No space left on device" in said, said
        if k == 3:
            assert "client 3 cannot take part in round 0" in said and "the store" in said, said
        else:
            assert "stops: the store failed client 3's part" in said, said
    names = Store(store).bound("f/round/0/")
    assert not [n for n in names if n.endswith("/client/3")], "client 3 left a record"
    assert not [n for n in names if n.endswith("/average")], "round 0 was averaged without it"
    assert [n for n in names if n.endswith("/fault/3")], names
