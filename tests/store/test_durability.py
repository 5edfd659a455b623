"""When a store's writes are durable (soma.files): a name is never made durable before
everything it reaches, alone or in a group commit; scratch makes no fsync, and is refused on
a store that says it is shared.

The crash model is the pessimistic one: anything written since the last pass may or may not
have reached the disk, in any order. So at the instant a name is placed (its rename or link
onto `names/`), every blob it reaches must have existed at the last pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import soma.store.folder.commit as store_module  # where the passes are made
from soma.config import spec
from soma.store import BadStore, Store, files

HEX = re.compile(rb"[0-9a-f]{64}")


def _where(dst, dir_fd: int | None) -> str:
    """The path a rename or link placed `dst` at (names go relative to their folder's fd)."""
    if dir_fd is None:
        return str(dst)
    return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), dst)


class Watch:
    """Every pass the store makes, and every name it places, checked against the last pass."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store, self.durable, self.placed, self.passes = store, set(), [], 0
        real_pass, real_rename, real_link = store_module.make_durable, os.rename, os.link

        def make_durable(found, folders, whole=None):
            real_pass(found, folders, whole)
            self.passes += 1
            self.durable = {p.name for p in (store.directory / "blobs").glob("*/*")}

        def rename(src, dst, *args, **kwargs):
            real_rename(src, dst, *args, **kwargs)
            # nothing passed in between: as if checked the instant before
            self._placed(_where(dst, kwargs.get("dst_dir_fd")))

        def link(src, dst, *args, **kwargs):
            real_link(src, dst, *args, **kwargs)
            self._placed(_where(dst, kwargs.get("dst_dir_fd")))

        monkeypatch.setattr(store_module, "make_durable", make_durable)
        monkeypatch.setattr(os, "rename", rename)
        monkeypatch.setattr(os, "link", link)

    def _placed(self, dst) -> None:
        names = str(self.store.directory / "names") + os.sep
        if not str(dst).startswith(names):
            return
        digest = Path(dst).read_text().strip()
        self.placed.append((str(dst)[len(names) :], self._not_durable(digest)))

    def _not_durable(self, digest: str, seen: set[str] | None = None) -> list[str]:
        """What `digest` reaches (itself, and every blob a record names) not durable yet."""
        seen = set() if seen is None else seen
        if digest in seen:
            return []
        seen.add(digest)
        missing = [] if digest in self.durable else [digest]
        path = self.store.blob_path(digest)
        if path.exists() and path.stat().st_size < 1 << 16:
            for found in HEX.findall(path.read_bytes()):
                if self.store.blob_path(found.decode()).exists():
                    missing += self._not_durable(found.decode(), seen)
        return missing


def export(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"w": torch.randn(64, generator=g)}, "out": {"b": torch.randn(8, generator=g)}}


def test_a_group_commit_places_its_names_after_one_pass_over_every_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "s")
    watch = Watch(store, monkeypatch)
    with store.group():
        for k in range(4):
            weights = store.put_value(export(k))
            store.keep(f"run/client/{k}", {"weights": weights, "size": k})
        assert store.bound("run/") == []  # bound at the end of the group, not before
    assert store.bound("run/") == [f"run/client/{k}" for k in range(4)]
    assert [name for name, _ in watch.placed] == [f"run/client/{k}" for k in range(4)]
    assert all(not missing for _, missing in watch.placed), watch.placed
    assert watch.passes == 2  # blobs and temporaries, then the names
    for k in range(4):
        weights = store.recall_digest(store.recall(f"run/client/{k}")["weights"])
        assert torch.equal(weights["fc"]["w"], export(k)["fc"]["w"])


def test_a_name_bound_or_claimed_alone_never_reaches_a_blob_not_yet_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "s")
    watch = Watch(store, monkeypatch)
    store.keep("a/kept", {"export": export(1)})
    assert store.claim("a/claimed", store.put_value({"who": 1, "export": export(2)}))
    store.bind("a/bound", store.put_value(export(3)))
    assert [name for name, _ in watch.placed] == ["a/kept", "a/claimed", "a/bound"]
    assert all(not missing for _, missing in watch.placed), watch.placed


def test_a_group_that_raises_still_binds_what_it_kept(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    with pytest.raises(RuntimeError), store.group():
        store.keep("x/0", {"i": 0})
        raise RuntimeError("a client's task failed")
    assert store.recall("x/0") == {"i": 0}


def test_scratch_makes_no_fsync_and_keeps_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    monkeypatch.setattr(files, "_SYNCFS", lambda fd: calls.append(fd) or 0)
    scratch = Store(tmp_path / "scratch", durability="scratch")
    with scratch.group():
        digest = scratch.keep("n/0", {"export": export(0)})
    scratch.claim("n/1", digest)
    assert calls == []
    assert Store(tmp_path / "durable").keep("n/0", {"export": export(0)}) == digest
    assert calls  # the durable store made its passes


def test_scratch_is_refused_on_a_store_that_says_it_is_shared(tmp_path: Path) -> None:
    Store(tmp_path / "s", shared=True)
    marker = tmp_path / "s" / files.SHARED_MARKER
    assert marker.is_file()
    with pytest.raises(BadStore, match=f"says it is shared.*{marker}"):
        Store(tmp_path / "s", durability="scratch")
    with pytest.raises(BadStore, match="says it is shared"):
        Store(tmp_path / "new", durability="scratch", shared=True)
    assert not (tmp_path / "new").exists()  # refused before anything was made
    Store(tmp_path / "s")  # durable, it opens
    with pytest.raises(BadStore, match="durability 'fast' is not one of durable, scratch"):
        Store(tmp_path / "s", durability="fast")


def test_soma_simulate_refuses_scratch_on_a_shared_store_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from soma.cli import main

    Store(tmp_path / "s", shared=True)
    before = sorted(p.name for p in (tmp_path / "s").rglob("*"))
    run = ["simulate", "--rounds", "1", "--clients", "2", "--store", str(tmp_path / "s")]
    assert main([*run, "--durability", "scratch"]) == 1
    said = capsys.readouterr().err
    assert "--durability" in said and "says it is shared" in said, said
    assert sorted(p.name for p in (tmp_path / "s").rglob("*")) == before
    bad = spec.RunSpec(run="r", task="soma.tasks.control", clients=2, rounds=1, durability="x")
    with pytest.raises(spec.ConfigRefused, match="config key `durability` must be one of"):
        bad.check()


def test_the_run_layer_takes_the_durabilities_and_timing_from_modules_with_no_torch() -> None:
    """One spelling of the durabilities (soma.files) and of the timing defaults (soma.timing),
    both torch-free as soma.config is (the floor the Snakefile imports at parse time), so
    that it needs no second copy."""
    code = (
        "import sys\n"
        "import importlib, pkgutil, soma.config, soma.files, soma.timing\n"
        "for m in pkgutil.iter_modules(soma.config.__path__):\n"
        "    importlib.import_module('soma.config.' + m.name)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert spec.DURABILITIES is files.DURABILITIES


def test_a_simulated_run_never_places_a_name_before_what_it_reaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole run (start, contributions grouped by the one process hosting them, the
    averaging's claims and records): every name placed reaches only durable blobs."""
    import importlib

    import soma

    store = Store(tmp_path / "s")
    watch = Watch(store, monkeypatch)
    monkeypatch.setattr(importlib.import_module("soma.run.simulate"), "store_at", _given(store))
    soma.simulate("soma.tasks.control", clients=4, rounds=2, store=tmp_path / "s")
    placed = [name for name, _ in watch.placed]
    assert sum("/client/" in name for name in placed) == 8
    assert sum(name.endswith("/average") for name in placed) == 2
    assert all(not missing for _, missing in watch.placed), watch.placed
    # issue 23's target, 3 passes a contribution with the averages, plus federated evaluation
    # (soma.run.evaluation: the control task has evaluate_local): one group commit of the clients'
    # evaluations and the round's `federated` record, 2 passes each, a round
    assert watch.passes <= 3 * 8 + 2 * 4


def _given(store: Store):
    from contextlib import contextmanager

    @contextmanager
    def store_at(path, spec, **_):
        yield store

    return store_at


def test_the_workflow_takes_durability_as_a_config_key_and_refuses_scratch_when_shared(
    tmp_path: Path,
) -> None:
    import jsonschema
    import yaml

    root = Path(__file__).resolve().parents[2]
    schema = yaml.safe_load((root / "workflow/schemas/config.schema.yaml").read_text())
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    for durability in spec.DURABILITIES:
        jsonschema.validate({**config, "run": "r", "durability": durability}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**config, "run": "r", "durability": "fast"}, schema)
    given = {"store": str(tmp_path / "s"), "durability": "scratch"}
    assert spec.RunSpec.config_store(given).durability == "scratch"
    Store(tmp_path / "s", shared=True)
    with pytest.raises(spec.ConfigRefused, match="config key `durability`: .* says it is shared"):
        spec.RunSpec.config_store(given)
