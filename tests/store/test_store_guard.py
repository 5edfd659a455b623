"""The store defends itself (issue 20, items 1 and 2): it never follows a symbolic link it
did not make, and gc cannot remove live data.

Each symlink the reliability probe planted by hand is planted here: `names/<run>` a link
(verify said "clean" and gc deleted the live run), `tmp/` a link (gc deleted a file outside
the store), a blob a link (a read set an outside file's mtime to 1970), and the store's
other folders. And each way gc ate live data: `gc(min_age=0)`, a run's start weights left
unbound while round 0 trains, `--keep-runs` dropping a run that is still going.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
import torch

import soma
import soma.run.step
from soma import health
from soma.cli import main
from soma.round import layout
from soma.store import BadStore, CorruptName, Store, SymlinkInStore

HOUR = 3600.0
KEY = "ab" * 32
OUTSIDE_MTIME = 1_600_000_000  # a user's file outside the store, dated so a touch shows


def aged(store: Store, seconds: float = 2 * HOUR) -> None:
    then = time.time() - seconds
    for path in (store.directory / "blobs").rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, (then, then))


def outside_file(tmp_path: Path, name: str = "precious.txt", data: bytes = b"mine") -> Path:
    folder = tmp_path / "outside"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    os.utime(path, (OUTSIDE_MTIME, OUTSIDE_MTIME))
    return path


def live_run(store: Store, run: str = "live") -> str:
    """A run's round with a client record and its average (what the names reach)."""
    meeting = layout.meeting(run, 0, KEY)
    store.keep(layout.client(meeting, 0, 2), {"w": torch.arange(4.0)})
    return store.keep(layout.average(meeting), {"w": torch.ones(4)})


# --- 1. symbolic links ---------------------------------------------------------------------


def test_names_of_a_run_behind_a_symlink_are_reported_and_gc_keeps_the_run(tmp_path) -> None:
    store = Store(tmp_path / "store")
    average = live_run(store)
    real = tmp_path / "moved-by-hand"
    os.rename(store.directory / "names" / "live", real)
    link = store.directory / "names" / "live"
    os.symlink(real, link)
    aged(store)
    report = health.verify(store)
    assert not report.clean and [p.kind for p in report.problems][:1] == ["symlink"]
    assert report.problems[0].path == str(link), report.lines()
    with pytest.raises(health.HealthError, match=f"gc: {link} is a symbolic link"):
        health.gc(store, min_age=HOUR)
    assert store.has(average) and (real / "round").is_dir()  # nothing was removed
    with pytest.raises(SymlinkInStore, match=str(link)):  # never listed or read through
        store.bound("live/")
    with pytest.raises(SymlinkInStore, match=str(link)):
        store.resolve(layout.average(layout.meeting("live", 0, KEY)))
    assert main(["verify", "--store", str(store.directory)]) == 1


def test_tmp_a_symlink_is_refused_and_gc_deletes_nothing_outside(tmp_path, capsys) -> None:
    store = Store(tmp_path / "store")
    victim = outside_file(tmp_path, f"{store._host}.1.1.abcdef.blob")  # a temporary's name
    os.rmdir(store.directory / "tmp")
    os.symlink(victim.parent, store.directory / "tmp")
    with pytest.raises(health.HealthError, match=f"{store.directory / 'tmp'} is a symbolic"):
        health.gc(store, min_age=HOUR)
    assert victim.read_bytes() == b"mine"
    with pytest.raises(BadStore, match=f"{store.directory / 'tmp'} is a symbolic link"):
        Store(store.directory)
    assert main(["gc", "--store", str(store.directory)]) == 1
    assert "is a symbolic link" in capsys.readouterr().err and victim.exists()


def test_a_blob_that_is_a_symlink_is_refused_by_reads_and_never_marked(tmp_path) -> None:
    digest = Store(tmp_path / "store").put(b"the bytes the name promises")
    store = Store(
        tmp_path / "store"
    )  # another reader: the writer reads its small blobs from memory (folder.write_cache)
    path = store.blob_path(digest)
    outside = outside_file(tmp_path, data=b"not those bytes")
    os.chmod(path, 0o644)
    os.unlink(path)
    os.symlink(outside, path)
    for read in (store.get, store.has, store.describe, store.recall_digest):
        with pytest.raises(SymlinkInStore, match=f"blob {path} is a symbolic link"):
            read(digest)
    assert outside.stat().st_mtime == OUTSIDE_MTIME  # never marked corrupt through the link
    report = health.verify(store)
    assert [(p.kind, p.path) for p in report.problems] == [("symlink", str(path))]
    assert outside.stat().st_mtime == OUTSIDE_MTIME and outside.read_bytes() == b"not those bytes"
    assert store.put(b"the bytes the name promises") == digest  # a put replaces the link
    assert not path.is_symlink() and store.get(digest) == b"the bytes the name promises"
    assert outside.read_bytes() == b"not those bytes" and outside.stat().st_mtime == OUTSIDE_MTIME


def test_a_fan_out_folder_or_a_name_file_that_is_a_symlink_is_refused(tmp_path) -> None:
    digest = Store(tmp_path / "store").put(b"a blob in a folder moved away")
    store = Store(
        tmp_path / "store"
    )  # another reader: the writer reads its small blobs from memory (folder.write_cache)
    folder = store.blob_path(digest).parent
    os.rename(folder, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", folder)
    with pytest.raises(SymlinkInStore, match=f"blobs {folder} is a symbolic link"):
        store.get(digest)
    name = store.directory / "names" / "planted"
    os.symlink(outside_file(tmp_path), name)
    with pytest.raises(SymlinkInStore, match=f"name file {name} is a symbolic link"):
        store.resolve("planted")
    paths = [p.path for p in health.verify(store).problems if p.kind == "symlink"]
    assert paths == sorted([str(folder), str(name)])


def test_resolve_many_refuses_a_planted_link_or_a_corrupt_name_as_resolve_does(tmp_path) -> None:
    """Names read from one opening of their folder: a name file or a folder of names that
    is a link is refused naming it, a name that holds no digest is refused naming its file."""
    store = Store(tmp_path / "store")
    digest = store.put(b"x")
    store.bind("run/round/0/client/0", digest)
    folder = store.directory / "names" / "run" / "round" / "0" / "client"
    assert store.resolve_many(["run/round/0/client/0", "run/round/0/client/1"]) == [digest, None]
    os.symlink(outside_file(tmp_path), folder / "1")
    with pytest.raises(SymlinkInStore, match=f"name file {folder / '1'} is a symbolic link"):
        store.resolve_many(["run/round/0/client/0", "run/round/0/client/1"])
    os.unlink(folder / "1")
    (folder / "1").write_text("not a digest\n")
    with pytest.raises(CorruptName, match=f"name file {folder / '1'} does not hold a digest"):
        store.resolve_many(["run/round/0/client/1"])
    os.rename(folder, tmp_path / "moved")
    os.symlink(tmp_path / "moved", folder)
    with pytest.raises(SymlinkInStore, match=f"{folder} is a symbolic link"):
        store.resolve_many(["run/round/0/client/0"])


def test_reading_many_blobs_opens_their_folders_once_and_never_through_a_link(tmp_path) -> None:
    """Inside `reading()` a thread opens each fan-out folder once (folder.held_folders): a folder
    that is a link is refused there as outside, one held is the store's own even if a link
    replaces it meanwhile (refused at the next read outside), and nothing stays open after."""
    writer = Store(tmp_path / "store")
    kept, planted = writer.put(b"a blob read twice"), writer.put(b"a blob behind a link")
    store = Store(
        tmp_path / "store"
    )  # another reader: the writer reads its small blobs from memory (folder.write_cache)
    kept_folder, planted_folder = store.blob_path(kept).parent, store.blob_path(planted).parent
    assert kept_folder != planted_folder
    os.rename(planted_folder, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", planted_folder)
    open_before = len(os.listdir("/proc/self/fd"))
    with store.reading():
        assert store.get(kept) == b"a blob read twice"
        with pytest.raises(SymlinkInStore, match=f"blobs {planted_folder} is a symbolic link"):
            store.get(planted)
        os.rename(kept_folder, tmp_path / "moved")
        os.symlink(tmp_path / "moved", kept_folder)
        assert store.get(kept) == b"a blob read twice"  # from the folder held, not the link
        with store.reading():  # nested: the outer one holds
            assert store.get(kept) == b"a blob read twice"
    assert len(os.listdir("/proc/self/fd")) == open_before
    with pytest.raises(SymlinkInStore, match=f"blobs {kept_folder} is a symbolic link"):
        store.get(kept)


def test_writes_never_go_through_a_planted_link(tmp_path) -> None:
    """A bind, a claim and a blob's install open each folder on their way with no link
    followed: a link planted as a run's names or as a fan-out folder of blobs takes nothing
    outside the store, and the refusal names the link."""
    store = Store(tmp_path / "store")
    digest = store.put_value({"w": torch.ones(2)})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (store.directory / "names" / "run").symlink_to(elsewhere)
    for place in (store.bind, store.claim):
        with pytest.raises(SymlinkInStore, match="names/run"):
            place("run/round/0/about", digest)
        with pytest.raises(SymlinkInStore, match="names/run"):
            place("run/about", digest)
    assert list(elsewhere.iterdir()) == []
    data = b"bytes never kept before"
    fan_out = store.blob_path(hashlib.sha256(data).hexdigest()).parent
    if fan_out.exists():
        fan_out.rename(tmp_path / "moved")
    fan_out.symlink_to(elsewhere)  # the folder this blob would go to
    with pytest.raises(SymlinkInStore, match=fan_out.name):
        store.put(data)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("folder", ["blobs", "names", "attic"])
def test_a_store_folder_that_is_a_symlink_is_refused_when_the_store_is_opened(
    tmp_path, folder
) -> None:
    store = Store(tmp_path / "store")
    live_run(store)
    real = tmp_path / f"real-{folder}"
    place = store.directory / folder
    if place.exists():
        os.rename(place, real)
    else:
        real.mkdir()
    os.symlink(real, place)
    with pytest.raises(BadStore, match=f"{place} is a symbolic link"):
        Store(store.directory)
    with pytest.raises(health.HealthError, match=f"{place} is a symbolic link"):
        health.gc(store, min_age=HOUR)  # a store opened before the link was planted
    assert any(p.kind == "symlink" and p.path == str(place) for p in health.verify(store).problems)


def test_any_other_symlink_in_the_store_blocks_gc_until_it_is_removed(tmp_path) -> None:
    store = Store(tmp_path / "store")
    lonely = store.put(b"garbage nobody names")
    aged(store)
    link = store.directory / "names" / "notes"
    link.mkdir()
    (link / "pointer").symlink_to(outside_file(tmp_path))
    with pytest.raises(health.HealthError, match="is a symbolic link"):
        health.gc(store, min_age=HOUR)
    assert store.has(lonely)
    (link / "pointer").unlink()
    assert health.gc(store, min_age=HOUR).blobs_removed == 1 and not store.has(lonely)


# --- 2. gc cannot remove live data ---------------------------------------------------------


def test_the_library_gc_has_the_floor_of_the_command(tmp_path) -> None:
    store = Store(tmp_path / "store")
    just_put = store.put(b"put, about to be bound")
    temporary = store.directory / "tmp" / f"{store._host}.{os.getpid()}.1.abcdef.blob"
    temporary.write_bytes(b"a live writer's temporary")
    for too_young in (0, 1, health.MIN_AGE - 1, float("nan")):
        with pytest.raises(health.HealthError, match="is below 120s"):
            health.gc(store, min_age=too_young)
    then = time.time() - health.MIN_AGE / 2
    os.utime(store.blob_path(just_put), (then, then))
    os.utime(temporary, (then, then))
    report = health.gc(store, min_age=health.MIN_AGE)
    assert report.blobs_removed == 0 and store.has(just_put) and temporary.exists()


def test_a_runs_start_is_named_while_round_0_trains_so_gc_cannot_take_it(
    tmp_path, monkeypatch
) -> None:
    """gc at the floor, every blob aged, in the middle of round 0's training: the start
    weights the next client loads are there (the probe lost every client this way); and
    the round is announced, so that `gc --keep-runs` sees the run is still going."""
    where = tmp_path / "store"
    real, collected = soma.run.step.train_locally, []

    def train_then_collect(*args, **kwargs):
        result = real(*args, **kwargs)
        if not collected:
            store = Store(where)
            aged(store)
            collected.append(health.gc(store, min_age=health.MIN_AGE))
            collected.append(store.bound(layout.rounds("simulation")))  # the round is open
        return result

    monkeypatch.setattr(soma.run.step, "train_locally", train_then_collect)
    done = soma.simulate(
        "soma.tasks.control", clients=2, rounds=1, task_options={"examples": 32}, store=where
    )
    start = done.rounds[0].record["start"]
    assert collected and all(m is not None for m in done.rounds[0].metrics.values())
    assert [n.rsplit("/", 1)[-1] for n in collected[1]] == ["about"]  # announced, no client yet
    assert Store(where).resolve(layout.starting("simulation", start)) == start
    assert layout.run_of(layout.starting("simulation", start)) == "simulation"


def test_keep_runs_refuses_to_drop_a_run_with_an_open_round_unless_forced(tmp_path, capsys) -> None:
    store = Store(tmp_path / "store")
    live_run(store, "done")
    going = layout.meeting("going", 1, KEY)
    live_run(store, "going")  # round 0 averaged ...
    store.keep(layout.client(going, 0, 2), {"w": torch.zeros(4)})  # ... round 1 not yet
    fresh = store.put_value({"w": torch.ones(2)})
    store.claim(layout.starting("fresh", fresh), fresh)  # started, round 0 training
    before = store.bound()
    with pytest.raises(
        health.HealthError, match=r"run 'fresh' \(round 0\); run 'going' \(round 1\)"
    ):
        health.gc(store, keep_runs=["done"], min_age=HOUR)
    assert store.bound() == before
    assert main(["gc", "--store", str(store.directory), "--keep-runs", "done"]) == 1
    assert "--force" in capsys.readouterr().err and store.bound() == before
    assert (
        main(["gc", "--store", str(store.directory), "--keep-runs", "done", "going", "--force"])
        == 0
    )
    assert store.bound("fresh/") == [] and store.bound("going/") and store.bound("done/")
