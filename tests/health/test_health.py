"""A store's health (soma/health/), and the store's part of it (soma/store/folder/).

verify finds exactly the damage done (a flipped bit, a truncation, a lost blob, a name file
that holds no digest, a stray file) and says where; repair rebuilds an average bit for bit
from its inputs and says which rerun fixes a client's export, and that rerun does; a keep
over a corrupt blob replaces it instead of "succeeding" over it; gc removes what nothing
reaches once it is old, never what a record names as text, never a young blob, never a
live writer's temporary, and never a blob a put refreshed between its listing and its
removal; every refusal names its path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import communicated

import soma
from soma import health
from soma.cli import main
from soma.health import collecting, repairing
from soma.round import Backoff, status
from soma.store import CORRUPT_MARK_NS, CorruptBlob, Store

torch.set_num_threads(1)
HERE = Path(__file__).resolve().parents[1]
HOUR = 3600.0
QUICK = Backoff(first=0.002, cap=0.02)


def weights(seed: int, n: int = 32) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "fc": {"weight": torch.randn(n, n, generator=g), "bias": torch.randn(n, generator=g)},
        "head": {"weight": torch.randn(4, n, generator=g)},
    }


def federated_run(
    store: Store, run: str = "ctl", rounds: int = 3, clients: int = 3, strategy: str = "fedadam"
) -> list[dict]:
    """A run of `rounds` rounds, its clients as threads; each round's average record."""
    start, state, records = store.put_value(weights(0)), None, []
    for r in range(rounds):
        threads = [
            threading.Thread(
                target=soma.gather,
                args=(store, weights(100 * r + k)),
                kwargs=dict(
                    run=run,
                    round=r,
                    clients=clients,
                    mine=k,
                    size=10 + k,
                    deadline=60,
                    backoff=QUICK,
                    start=start,
                    state=state,
                    strategy=strategy,
                    options={"server_lr": 0.1} if strategy == "fedadam" else {},
                ),
            )
            for k in range(clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        record = store.recall_digest(status(store, run)[r]["average"])
        records.append(record)
        start, state = record["weights"], record["state"]
    return records


def tensor_blob(store: Store, value_digest: str, node: str = "fc") -> str:
    """The digest of one node's tensor blob in a kept export."""
    return json.loads(store.get(value_digest))["value"][node]["$tensors"]


def damage(path: Path, how: str) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0x10
    elif how == "truncate":
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))
    if how == "delete":
        path.unlink()


def backdate(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def backdate_all(store: Store, seconds: float) -> None:
    for path in (store.directory / "blobs").rglob("*"):
        if path.is_file():
            backdate(path, seconds)


@pytest.fixture
def run(tmp_path: Path) -> tuple[Store, list[dict]]:
    store = Store(tmp_path / "store")
    return store, federated_run(store)


# --- verify ------------------------------------------------------------------------------


def test_a_finished_run_verifies_clean_and_every_blob_is_hashed(run) -> None:
    store, _ = run
    seen: list[tuple[int, int]] = []
    report = health.verify(store, progress=lambda done, total: seen.append((done, total)))
    assert report.clean, report.lines()
    on_disk = [p for p in (store.directory / "blobs").rglob("*") if p.is_file()]
    assert report.blobs == len(on_disk)
    assert report.bytes == sum(p.stat().st_size for p in on_disk)
    assert seen and seen[-1][0] == seen[-1][1] > 0, "progress ends at the total"
    assert health.verify(store, run="ctl").clean


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_a_damaged_blob_is_reported_exactly_with_its_path(run, how: str) -> None:
    store, records = run
    client = store.recall_digest(records[1]["inputs"][2]["record"])
    victim = tensor_blob(store, client["weights"])
    damage(store.blob_path(victim), how)
    report = health.verify(store)
    assert report.damaged() == {victim}, report.lines()
    (problem,) = report.problems
    assert problem.kind == "corrupt" and problem.path == str(store.blob_path(victim))
    assert "client 2's export of round 1 of run 'ctl'" in problem.fix
    assert "delete" not in problem.fix
    assert health.verify(store, run="ctl").damaged() == {victim}


def test_a_lost_blob_is_reported_missing_naming_who_refers_to_it(run) -> None:
    store, records = run
    victim = records[2]["weights"]
    damage(store.blob_path(victim), "delete")
    report = health.verify(store)
    assert report.damaged() == {victim}, report.lines()
    (problem,) = report.problems
    assert problem.kind == "missing"
    assert any('value["weights"]' in via for via in problem.via), problem.via
    assert problem.rebuild is not None and "soma repair" in problem.fix


def test_a_name_that_holds_no_digest_and_a_stray_file_are_reported(run) -> None:
    store, _ = run
    name = store.bound("ctl/round/0/")[0]
    path = store.directory / "names" / name
    path.write_text("not a digest\n")
    stray = store.directory / "blobs" / "ab" / "notes.txt"
    stray.parent.mkdir(exist_ok=True)
    stray.write_text("hello")
    report = health.verify(store)
    kinds = {p.kind: p for p in report.problems}
    assert set(kinds) == {"bad-name", "stray"}, report.lines()
    assert kinds["bad-name"].path == str(path) and kinds["stray"].path == str(stray)


def test_verify_of_a_run_the_store_does_not_hold_is_refused_by_name(run) -> None:
    store, _ = run
    with pytest.raises(health.HealthError, match=r"no run 'ctrl'.*'ctl'"):
        health.verify(store, run="ctrl")


# --- a keep over a corrupt blob ----------------------------------------------------------


def _export_blob(store: Store, name: str) -> str:
    record = json.loads(store.get(store.resolve(name)))["value"]
    return record["export"]["fc"]["$tensors"]


@pytest.mark.parametrize("how", ["truncate", "flip-read", "flip-verify"])
def test_keeping_a_value_again_repairs_a_corrupt_blob_atomically(tmp_path: Path, how: str) -> None:
    """A truncation shows in the size (free); a flipped bit once a read found it (marked),
    or always with verify_existing. The blob is replaced, never written in place."""
    store = Store(tmp_path)
    value = {"export": weights(1), "size": 3}
    store.keep("v", value)
    victim = _export_blob(store, "v")
    path = store.blob_path(victim)
    damage(path, "truncate" if how == "truncate" else "flip")
    broken = path.stat().st_ino
    if how == "flip-read":
        with pytest.raises(CorruptBlob):
            Store(tmp_path).recall(
                "v"
            )  # another reader: the writer reads its small blobs from memory (folder.write_cache)
        assert path.stat().st_mtime_ns == CORRUPT_MARK_NS, "the read marked it"
    keeper = Store(tmp_path, verify_existing=how == "flip-verify")
    keeper.keep("v", value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == victim
    assert path.stat().st_ino != broken, "replaced by a rename, not written in place"
    assert path.stat().st_mode & 0o222 == 0
    assert torch.equal(store.recall("v")["export"]["fc"]["weight"], value["export"]["fc"]["weight"])
    assert os.listdir(tmp_path / "tmp") == []


def test_a_cheap_keep_trusts_an_unmarked_blob_of_the_right_size(tmp_path: Path) -> None:
    """The documented limit: a flip nobody has read yet costs a hash to find."""
    store = Store(tmp_path)
    value = {"export": weights(1), "size": 3}
    store.keep("v", value)
    path = store.blob_path(_export_blob(store, "v"))
    damage(path, "flip")
    store.keep("v", value)
    with pytest.raises(CorruptBlob):
        Store(tmp_path).recall(
            "v"
        )  # another reader: the writer reads its small blobs from memory (folder.write_cache)


def test_the_corrupt_blob_message_advises_only_what_works(tmp_path: Path) -> None:
    store = Store(tmp_path)
    digest = store.put(b"the weights of round 3" * 100)
    damage(store.blob_path(digest), "flip")
    with pytest.raises(CorruptBlob) as refused:
        Store(tmp_path).get(
            digest
        )  # another reader: the writer reads its small blobs from memory (folder.write_cache)
    message = str(refused.value)
    assert f"soma repair --store {tmp_path}" in message
    assert "delete" not in message


# --- repair ------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["weights-tensor", "weights-record", "state"])
def test_repair_rebuilds_an_average_bit_for_bit_from_its_inputs(run, what: str) -> None:
    store, records = run
    average = records[1]
    victim = {
        "weights-tensor": tensor_blob(store, average["weights"]),
        "weights-record": average["weights"],
        "state": average["state"],
    }[what]
    original = store.blob_path(victim).read_bytes()
    damage(store.blob_path(victim), "flip" if what != "weights-record" else "delete")
    names = {n: store.resolve(n) for n in store.bound()}
    report = health.repair(store)
    assert report.clean, report.lines()
    assert len(report.rebuilt) == 1 and "round 1 of run 'ctl'" in report.rebuilt[0]
    assert store.blob_path(victim).read_bytes() == original
    assert {n: store.resolve(n) for n in store.bound()} == names, "repair binds nothing"
    assert health.verify(store).clean


def test_repair_rebuilds_consecutive_rounds_in_order(run) -> None:
    """Round 2 steps from round 1's weights: both lost, both come back."""
    store, records = run
    for record in records[1:]:
        damage(store.blob_path(record["weights"]), "delete")
    report = health.repair(store)
    assert report.clean and len(report.rebuilt) == 2, report.lines()


def _named_in_round(store: Store, r: int, part: str) -> str:
    """The one name of round r of run 'ctl' with `part` in it (or at its end)."""
    (name,) = [n for n in store.bound(f"ctl/round/{r}/") if n.endswith(part) or part + "/" in n]
    return name


@pytest.mark.parametrize("what", ["about", "average", "computed", "all at once"])
def test_repair_remakes_lost_records_from_what_the_store_still_holds(run, what: str) -> None:
    """A meeting's identity, an average's record, the averager's holder record: each is
    reassembled from the other records and kept only because it hashes to the lost digest."""
    store, records = run
    parts = {"about": ["/about"], "average": ["/average"], "computed": ["/computed"]}
    chosen = parts.get(what, ["/about", "/computed"])
    victims = [store.resolve(_named_in_round(store, 1, part)) for part in chosen]
    if what == "all at once":  # and what each needs, elsewhere: round 2's record, its weights
        victims += [store.resolve(_named_in_round(store, 2, "/average")), records[1]["weights"]]
    originals = {d: store.blob_path(d).read_bytes() for d in victims}
    for i, digest in enumerate(victims):
        damage(store.blob_path(digest), "flip" if i % 2 else "delete")
    assert health.verify(store).damaged() >= {victims[0]}
    report = health.repair(store)
    assert report.clean, report.lines()
    for digest, data in originals.items():
        assert store.blob_path(digest).read_bytes() == data
    assert health.verify(store).clean


def test_repair_never_keeps_a_recomputation_that_differs(run, monkeypatch) -> None:
    store, records = run
    victim = records[0]["weights"]
    damage(store.blob_path(victim), "delete")
    other = store.put_value(weights(999))
    monkeypatch.setattr(repairing, "recompute_average", lambda store, record: (other, None))
    report = health.repair(store)
    assert not report.clean and "not the record's" in report.failed[0]
    assert not store.blob_path(victim).exists()


def test_a_client_export_is_left_with_its_rerun_and_the_rerun_repairs_it(run) -> None:
    store, records = run
    given = records[2]["inputs"][1]
    victim = tensor_blob(store, given["weights"])
    damage(store.blob_path(victim), "flip")
    report = health.repair(store, dry_run=True)
    assert not report.clean and [p.digest for p in report.left] == [victim]
    assert "client 1's export of round 2" in report.left[0].fix
    report = health.repair(store)
    assert not report.clean and report.rebuilt == []
    # what the advice says: the client's round again, which sends the same (seeded) export
    store.put_value(weights(100 * 2 + 1))
    assert health.verify(store).clean


@pytest.mark.parametrize("k", [1000, 3])
def test_repair_names_the_train_job_of_a_client_of_a_1001_client_round(
    tmp_path: Path, k: int
) -> None:
    """Above 1,000 clients a meeting files client records and the workflow's started markers
    by thousands (`started/1/1000`); the advice finds the marker where the job wrote it, and
    names the Snakemake target that reruns it."""
    from soma.round import Meeting, contribute
    from soma.workflow import _previous_attempt_died

    store = Store(tmp_path)
    meeting = Meeting("big", 0, 1001, start=store.put_value(weights(0)))
    assert _previous_attempt_died(store, meeting, k) is None  # the train job says it started
    contribute(store, meeting, weights(k), mine=k, size=10)
    assert store.resolve(f"{meeting.prefix}/started/{k // 1000}/{k}") is not None
    record = store.recall(f"{meeting.prefix}/client/{k // 1000}/{k}")
    victim = tensor_blob(store, record["weights"])
    damage(store.blob_path(victim), "flip")
    report = health.repair(store, dry_run=True)
    (left,) = report.left
    target = f"results/big/round/0/client/{k}.json"
    assert f"--until {target} --forcerun {target}" in left.fix, left.fix
    assert f"client {k}'s export of round 0" in left.fix


def test_repair_names_the_batch_receipt_of_a_client_trained_in_a_batch(tmp_path: Path) -> None:
    """With `clients_per_job` above 1 a client's train job is its batch's (rule
    `train_batch`), whose receipt is `batch/<b>.json`: the advice for its damaged export
    names that target, not `client/<k>.json`, which no rule of such a run makes."""
    from soma import workflow

    options = {"partition": "labels_per_client", "labels_per_client": 5, "model": "softmax"}
    config = {
        "run": "batched",
        "task": "soma.tasks.digits",
        "task_options": {"soma.tasks.digits": {**options, "epochs": 1}},
        "clients": 4,
        "clients_per_job": 2,
        "rounds": 1,
        "seed": 0,
        "store": str(tmp_path / "store"),
        "metric": "accuracy",
    }
    start = str(tmp_path / "results/batched/start.json")
    workflow.start(config, start)
    receipt = tmp_path / "results/batched/round/0/batch/1.json"
    workflow.train_batch(config, 0, 1, [2, 3], start, str(receipt), before={})
    (given,) = [c for c in json.loads(receipt.read_text())["clients"] if c["client"] == 3]
    store = Store(tmp_path / "store")
    node = next(iter(json.loads(store.get(given["weights"]))["value"]))
    damage(store.blob_path(tensor_blob(store, given["weights"], node)), "flip")
    report = health.repair(store, dry_run=True)
    (left,) = report.left
    target = "results/batched/round/0/batch/1.json"
    assert f"--until {target} --forcerun {target}" in left.fix, left.fix
    assert "client 3's export of round 0" in left.fix and "batch 1" in left.fix, left.fix


def test_repair_removes_an_unreachable_corrupt_blob(run) -> None:
    store, _ = run
    lonely = store.put(b"nobody names me" * 10)
    damage(store.blob_path(lonely), "flip")
    report = health.repair(store)
    assert report.clean and report.removed == [str(store.blob_path(lonely))], report.lines()
    assert not store.blob_path(lonely).exists()


# --- gc ----------------------------------------------------------------------------------


def test_gc_keeps_what_names_reach_even_as_text_and_removes_old_garbage(run) -> None:
    store, records = run
    garbage = store.put_value({"killed": "before its bind", "w": torch.ones(100)})
    young = store.put(b"put a second ago, bound soon")
    backdate_all(store, 2 * HOUR)
    backdate(store.blob_path(young), 1.0)
    report = health.gc(store, min_age=HOUR)
    assert report.blobs_removed >= 2 and not store.has(garbage), report.lines()
    assert store.has(young) and report.kept_young == 1
    reader = Store(store.directory)  # another reader: the files, not the writer's memory
    for record in records:  # named only as text inside the average records
        assert reader.recall_digest(record["weights"]) and reader.recall_digest(record["state"])
    assert health.verify(store).clean
    assert health.gc(store, min_age=HOUR).blobs_removed == 0


def test_gc_dry_run_removes_nothing(run) -> None:
    store, _ = run
    store.put(b"garbage")
    backdate_all(store, 2 * HOUR)
    before = sorted(p for p in (store.directory / "blobs").rglob("*"))
    report = health.gc(store, dry_run=True, min_age=HOUR)
    assert report.blobs_removed >= 1
    assert sorted(p for p in (store.directory / "blobs").rglob("*")) == before


def test_gc_keep_runs_drops_the_other_runs_and_refuses_a_run_it_does_not_hold(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path)
    federated_run(store, "kept", rounds=1, strategy="fedavg")
    federated_run(store, "dropped", rounds=1, clients=2, strategy="fedavg")
    store.keep("notes/readme", {"text": "a name of no run"})
    with pytest.raises(health.HealthError, match=r"no run 'kpet'"):
        health.gc(store, keep_runs=["kpet"], min_age=HOUR)
    assert store.bound("dropped/")
    backdate_all(store, 2 * HOUR)
    report = health.gc(store, keep_runs=["kept"], min_age=HOUR)
    assert report.names_removed and all(n.startswith("dropped/") for n in report.names_removed)
    assert store.bound("dropped/") == [] and store.bound("kept/") and store.resolve("notes/readme")
    assert health.verify(store).clean and health.verify(store).unreachable == 0


def test_gc_removes_no_blob_while_a_reachable_record_is_corrupt(run) -> None:
    store, records = run
    store.put(b"garbage")
    backdate_all(store, 2 * HOUR)
    damage(store.blob_path(records[0]["inputs"][0]["record"]), "flip")
    report = health.gc(store, min_age=HOUR)
    assert report.blocked and report.blobs_removed == 0
    assert "soma repair" in report.blocked[0]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_gc_removes_the_temporaries_of_writers_that_are_gone_and_only_those(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path)
    tmp, host = tmp_path / "tmp", store._host
    dead = tmp / f"{host}.{_dead_pid()}.1.abcdef.blob"
    live = tmp / f"{host}.{os.getpid()}.1.abcdef.blob"
    elsewhere = tmp / "other-host.123.1.abcdef.blob"
    elsewhere_old = tmp / "other-host.124.1.abcdef.blob"
    fresh_dead = tmp / f"{host}.{_dead_pid()}.1.fedcba.blob"
    for path in (dead, live, elsewhere, elsewhere_old, fresh_dead):
        path.write_bytes(b"x" * 1000)
    for path in (dead, live, elsewhere):
        backdate(path, 600)
    backdate(elsewhere_old, 2 * HOUR)
    report = health.gc(store, min_age=HOUR)
    assert sorted(os.listdir(tmp)) == sorted(p.name for p in (live, elsewhere, fresh_dead))
    assert report.temporaries_removed == 2 and report.temporaries_kept == 3


def test_a_blob_put_between_gcs_listing_and_its_removal_stays(run, monkeypatch) -> None:
    """The race: gc lists an old unreachable blob, a writer puts those bytes again (one stat
    and a utime: it believes the blob is there), then gc comes to remove it."""
    store, _ = run
    data = b"an old export a client is about to send again"
    digest = store.put(data)
    backdate_all(store, 2 * HOUR)
    real = collecting._collect

    def put_first(store_, digest_, cutoff):
        if digest_ == digest:
            Store(store.directory).put(data)
        return real(store_, digest_, cutoff)

    monkeypatch.setattr(collecting, "_collect", put_first)
    health.gc(store, min_age=HOUR)
    assert Store(store.directory).get(digest) == data  # another reader: from the file
    assert not (store.directory / "attic" / digest).exists()


def test_a_blob_in_the_attic_is_found_by_every_read_and_put(tmp_path: Path) -> None:
    """What a gc killed between its move and its decision leaves: invisible to readers."""
    digest = Store(tmp_path).keep("v", {"w": torch.arange(10.0)})
    store = Store(
        tmp_path
    )  # another reader: the writer reads its small blobs from memory (folder.write_cache)
    (tmp_path / "attic").mkdir()
    os.rename(store.blob_path(digest), tmp_path / "attic" / digest)
    assert torch.equal(store.recall("v")["w"], torch.arange(10.0))
    assert store.blob_path(digest).exists()
    os.unlink(store.blob_path(digest))
    assert store.put_value({"w": torch.arange(10.0)}) == digest
    report = health.gc(store, min_age=HOUR)
    assert report.restored == 1 and os.listdir(tmp_path / "attic") == []
    assert health.verify(store).clean


def test_put_refreshes_an_old_blob_so_gc_keeps_it(tmp_path: Path) -> None:
    store = Store(tmp_path)
    digest = store.put(b"old")
    backdate(store.blob_path(digest), 2 * HOUR)
    store.put(b"old")
    assert time.time() - store.blob_path(digest).stat().st_mtime < 60
    assert health.gc(store, min_age=HOUR).blobs_removed == 0 and store.has(digest)


# --- the command line --------------------------------------------------------------------


def test_the_commands_exit_0_on_a_clean_store_and_1_on_damage(run, capsys) -> None:
    store, records = run
    where = str(store.directory)
    assert main(["verify", "--store", where]) == 0
    assert "clean" in capsys.readouterr().out
    assert main(["gc", "--store", where, "--dry-run"]) == 0
    assert main(["repair", "--store", where]) == 0
    victim = tensor_blob(store, records[1]["inputs"][0]["weights"])
    damage(store.blob_path(victim), "flip")
    capsys.readouterr()
    assert main(["verify", "--store", where, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [p["digest"] for p in out["problems"]] == [victim]
    assert main(["repair", "--store", where]) == 1
    assert "client 0's export of round 1" in capsys.readouterr().out
    assert main(["gc", "--store", where]) == 0


def test_the_commands_refuse_a_path_with_no_store_and_leave_nothing(tmp_path, capsys) -> None:
    missing = tmp_path / "no-store"
    for command in (["verify"], ["repair"], ["gc"]):
        assert main([*command, "--store", str(missing)]) == 1
        err = capsys.readouterr().err
        assert err.strip() == f"soma: no store at {missing} (no such folder)"
    assert not missing.exists()


def test_gc_refuses_a_min_age_below_the_refresh_window(run, capsys) -> None:
    store, _ = run
    assert main(["gc", "--store", str(store.directory), "--min-age", "30s"]) == 1
    assert capsys.readouterr().err.startswith("soma: gc: min_age 30s is below 120s")


def test_verify_of_an_unknown_run_is_one_line(run, capsys) -> None:
    store, _ = run
    assert main(["verify", "--store", str(store.directory), "--run", "nope"]) == 1
    assert capsys.readouterr().err.startswith("soma: no run 'nope' in the store at ")


@pytest.mark.slow
def test_a_soma_client_rerun_as_advised_repairs_its_export(tmp_path: Path) -> None:
    """The advice is a command, and running it works: a real `soma client` run, a client's
    export of round 1 flipped, the command from the advice run, verify clean."""
    base = [sys.executable, str(HERE / "round_worker.py"), "client", "--store", str(tmp_path)]
    args = ["--run", "ctl", "--rounds", "2", "--clients", "2", "--option", "examples=64"]
    clients = [
        subprocess.Popen(
            [*base, *args, "--mine", str(k)],
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for k in (0, 1)
    ]
    communicated(clients, 300, fail_fast=True)
    store = Store(tmp_path)
    meeting = status(store, "ctl")[1]["meeting"]
    record = store.recall(f"ctl/round/1/{meeting}/client/1")
    victim = tensor_blob(
        store, record["weights"], next(iter(store.recall_digest(record["weights"])))
    )
    damage(store.blob_path(victim), "flip")
    report = health.repair(store)
    (left,) = report.left
    command = left.fix.split("`")[1]
    assert command.startswith("soma client ") and "--mine 1" in command and "--rounds 2" in command
    done = subprocess.run(
        [sys.executable, str(HERE / "round_worker.py"), *shlex.split(command)[1:]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert health.verify(store).clean


def test_repair_rebuilds_a_tree_average_and_the_tree_nodes_bit_for_bit(tmp_path: Path) -> None:
    """An average made through a tree (soma.round.tree) is rebuilt through the same tree."""
    store = Store(tmp_path / "store")
    start = store.put_value(weights(0))
    threads = [
        threading.Thread(
            target=soma.gather,
            args=(store, weights(k)),
            kwargs=dict(
                run="t",
                round=0,
                clients=5,
                mine=k,
                size=k + 1,
                deadline=60,
                backoff=QUICK,
                start=start,
                strategy="fedadam",
                tree=2,
            ),
        )  # fmt: skip
        for k in range(5)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (row,) = soma.round.status(store, "t")
    record = store.recall_digest(row["average"])
    assert record["tree"]["fan_in"] == 2
    victims = [tensor_blob(store, record["weights"]), tensor_blob(store, record["tree"]["mean"])]
    originals = [store.blob_path(v).read_bytes() for v in victims]
    for victim in victims:
        damage(store.blob_path(victim), "flip")
    report = health.repair(store)
    assert report.clean, report.lines()
    assert [store.blob_path(v).read_bytes() for v in victims] == originals
    assert health.verify(store).clean
