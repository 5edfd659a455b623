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
from pathlib import Path

import pytest
from figures import FIGURES, printed
from helpers import FAULT_RUN, fault_clients

from soma.round import status
from soma.store import Store

pytestmark = pytest.mark.slow
CLIENTS = 4
ROWS = {
    "folder": "EIO x3 at a claim (quorum)",
    "full": "ENOSPC at a claim (quorum)",
    "503": "503 x6 to a client's PUTs",
    "restart": "S3 server kill -9, restart",
}


def clients(store: Path | str, *, plant: str | None = None, faulty: int = 3, env=None) -> list:
    """`soma client` for each of 4 digits clients (quorum 3, FedAdam, 2 rounds), all at
    once, with `plant` (SOMA_PLANT) in client `faulty`'s process and `env` (a client's
    environment beside this one's, by client) in each; each one's return code, stdout and
    stderr."""
    args = ["client", "--store", str(store), "--run", "f", "--rounds", "2", *FAULT_RUN]
    # a quorum's deadline outlasts the store's patience (120 s) and a fault note's grace
    args += ["--deadline", "150"]
    return fault_clients(args, plant=plant, faulty=faulty, env=env)


def final_weights(store: Path | str) -> str:
    """The digest of the weights the run's last round published."""
    return status(Store(store), "f")[-1]["weights"]


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    yield
    printed(request, list(ROWS.values()))


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
    figures = FIGURES[ROWS["folder"]]
    figures["trials"] += 1
    figures["faults"] += 3
    for code, _, err in clients(store, plant="EIO:/client/3:3"):
        assert code == 0, err
    figures["different"] += final_weights(store) != fault_free
    figures["ridden through"] += final_weights(store) == fault_free
    assert final_weights(store) == fault_free
    rounds = status(Store(store), "f")
    assert [r["written"] for r in rounds] == [[0, 1, 2, 3]] * 2, rounds


def test_a_full_disk_at_one_clients_claim_fails_every_process_naming_it_and_a_rerun_finishes(
    tmp_path, fault_free
) -> None:
    """Every process exits non-zero naming the full disk (client 3 itself, the others from
    its fault note); once the disk has room, the same command again finishes the run with
    the fault-free model (client 3's rerun forgets its old note as it starts)."""
    store = tmp_path / "store"
    done = clients(store, plant="ENOSPC:/client/3:0")
    figures = FIGURES[ROWS["full"]]
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
    for code, _, err in clients(store):
        assert code == 0, err[-3000:]
    figures["rerun"] += final_weights(store) == fault_free
    assert final_weights(store) == fault_free


# --- on a bucket (the session's SeaweedFS; a server of the test's own to kill) ---------------


@pytest.mark.s3
def test_six_503s_to_one_clients_puts_under_a_quorum_are_ridden_through_to_the_same_model(
    bucket, fault_free
) -> None:
    """Issue 31's first repro: before, client 3 dropped out ("failed: StoreError") and the
    others averaged without it, exit 0 everywhere, another model. (A run's weights are the
    same bits on a folder and on a bucket: the fault-free run on a folder is the measure.)"""
    from s3_bucket import BUCKET
    from s3_faults import FaultProxy

    store = f"s3://{BUCKET}/faults-{os.getpid()}-503"
    figures = FIGURES[ROWS["503"]]
    with FaultProxy(os.environ["AWS_ENDPOINT_URL"]) as proxy:
        proxy.slow_down(6, "PUT", path="/blobs/")
        done = clients(store, env=lambda k: {"AWS_ENDPOINT_URL": proxy.url} if k == 3 else {})
        slowed = proxy.count("PUT", "/blobs/", "slow_down")
    figures["trials"] += 1
    figures["faults"] += slowed
    for code, _, err in done:
        assert code == 0, err[-3000:]
    assert slowed == 6, proxy.log[:20]
    figures["different"] += final_weights(store) != fault_free
    figures["ridden through"] += final_weights(store) == fault_free
    assert final_weights(store) == fault_free
    assert [r["written"] for r in status(Store(store), "f")] == [[0, 1, 2, 3]] * 2


@pytest.mark.s3
def test_the_s3_server_killed_and_restarted_mid_round_is_ridden_through_to_the_same_model(
    bucket, tmp_path, fault_free
) -> None:
    """kill -9 of the bucket's server while round 0's clients contribute, restarted at once
    (~20 s to answer again, inside the default patience of 120 s): every client rides it
    through and the run ends with the model of a run nothing happened to."""
    import threading
    import time

    import boto3
    from s3_bucket import BUCKET, Server

    server = Server(str(tmp_path / "own"))
    server.start()
    figures = FIGURES[ROWS["restart"]]
    try:
        server.ready()
        env = {"AWS_ENDPOINT_URL": server.url}
        names = boto3.client("s3", endpoint_url=server.url)
        killed: list[float] = []

        def kill_once_a_record_is_there() -> None:
            while not killed:
                try:
                    listed = names.list_objects_v2(Bucket=BUCKET, Prefix="stormy/names/f/round/0/")
                except Exception:
                    listed = {}
                if any("/client/" in o["Key"] for o in listed.get("Contents", [])):
                    server.kill()
                    killed.append(time.monotonic())
                    server.start()
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_once_a_record_is_there, daemon=True)
        killer.start()
        done = clients(f"s3://{BUCKET}/stormy", env=lambda k: env)
        killed.append(-1.0)  # stops the killer if no record was ever seen
        killer.join(timeout=30)
        figures["trials"] += 1
        figures["faults"] += 1
        for code, _, err in done:
            assert code == 0, err[-3000:]
        assert killed[0] > 0, "the server was never killed"
        stormy = f"s3://{BUCKET}/stormy"
        with pytest.MonkeyPatch.context() as m:
            m.setenv("AWS_ENDPOINT_URL", server.url)
            same = final_weights(stormy) == fault_free
        figures["different"] += not same
        figures["ridden through"] += same
        assert same
    finally:
        server.kill()
