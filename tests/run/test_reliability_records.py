"""Records under faults, as figures: records written by hand (not through `contribute`) are
refused before the claim, naming the client; every record of a tree round lost, or its name
garbled, is reported and repaired by the advised rerun. The counts are printed at the end
of the module, e.g. `python -m pytest -q tests/run/test_reliability_records.py`; the
store's own faults (killed writers, a full disk, flipped bits, gc racing writers) are
tests/run/test_reliability.py's.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from damage import client_export, rerun
from figures import FIGURES, printed

import soma
from soma import health
from soma.round import Backoff
from soma.store import Store

pytestmark = pytest.mark.slow
torch.set_num_threads(1)
QUICK = Backoff(first=0.002, cap=0.02)


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    yield
    printed(request, ["records by hand", "tree round records"])


# --- records written by hand, not through contribute (issue 20) ---------------------------


def _hand_cases(store: Store) -> list[tuple[str, object]]:
    """(what, client 1's record) as a careless user or a hostile writer would leave it."""
    import json
    import struct

    from soma.store import codecs

    def export(v: float, **change) -> str:
        w = torch.full((4, 3), v)
        for at, value in change.items():
            w.view(-1)[int(at[1:])] = value
        return store.put_value({"fc": {"w": w, "b": torch.zeros(4)}})

    def header(**offsets) -> str:
        described = {
            k: {"dtype": "F32", "shape": [2], "data_offsets": o} for k, o in offsets.items()
        }
        raw = json.dumps(described).encode()
        blob = store.put(struct.pack("<Q", len(raw)) + raw + bytes(8))
        return store.put(codecs.record_bytes({"fc": {"$tensors": blob}}, None))

    def record(weights: object, **more) -> dict:
        return {"client": 1, "size": 1.0, "weights": weights, "extra": None, "own": None,
                "by": None, **more}  # fmt: skip

    return [
        ("NaN", record(export(1.0, i5=float("nan")))),
        ("infinity", record(export(1.0, i0=float("inf")))),
        ("overlapping offsets", record(header(a=[0, 8], b=[0, 8]))),
        ("offsets out of range", record(header(a=[0, 8], b=[8, 16]))),
        ("no weights key", {"client": 1, "size": 1.0}),
        ("weights not a digest", record(42)),
        ("weights not in the store", record("0" * 64)),
        ("weights not an export", record(store.put_value({"fc": 3}))),
        ("another client's record", record(export(1.0), client=0)),
        ("another network", record(store.put_value({"fc": {"w": torch.zeros(2)}}))),
        ("not a record", [1, 2]),
    ]


def test_records_written_by_hand_are_refused_before_the_claim_naming_the_client(
    tmp_path: Path,
) -> None:
    from soma.errors import SomaError
    from soma.round import Meeting, contribute

    store = Store(tmp_path / "store")
    figures = FIGURES["records by hand"]
    good = {"fc": {"w": torch.ones(4, 3), "b": torch.zeros(4)}}
    for i, (what, record) in enumerate(_hand_cases(store)):
        for quorum in (None, 1):
            meeting = Meeting(f"hand{i}", 0, 2, quorum=quorum)
            store.keep(meeting.client(1), record)
            figures["trials"] += 1
            figures["faults"] += 1
            if quorum is not None:  # left out, named in the average (issue 31)
                _left_out_by_hand(store, meeting, good, what, figures)
                continue
            with pytest.raises(SomaError) as refused:
                soma.gather(store, good, run=meeting.run, round=0, clients=2, mine=0, size=1.0,
                            deadline=0.2, backoff=QUICK, quorum=quorum)  # fmt: skip
            claimed = [n for n in store.bound(meeting.prefix) if "/inputs/" in n]
            named = "client 1" in str(refused.value)
            figures["detected"] += named and not claimed
            figures["lost"] += bool(claimed) or store.resolve(meeting.average) is not None
            assert named and not claimed, (what, str(refused.value), claimed)
    # a second contribution with other weights: refused, the first stands
    meeting = Meeting("twice", 0, 2)
    first = contribute(store, meeting, good, mine=1, size=1.0)
    figures["trials"] += 1
    figures["faults"] += 1
    with pytest.raises(SomaError, match="client 1 already contributed to round 0"):
        contribute(store, meeting, {"fc": {"w": torch.zeros(4, 3), "b": torch.ones(4)}},
                   mine=1, size=1.0)  # fmt: skip
    kept = store.resolve(meeting.client(1)) == first.record
    figures["detected"] += kept
    figures["lost"] += not kept


def _left_out_by_hand(store: Store, meeting, good: dict, what: str, figures: dict) -> None:
    """Under a quorum the hand-written record is refused alone: the honest client's weights
    are the average, and the average's record names client 1 as refused."""
    from soma.round import read_record, records

    mean = soma.gather(store, good, run=meeting.run, round=0, clients=2, mine=0, size=1.0,
                       deadline=0.2, backoff=QUICK, quorum=meeting.quorum)  # fmt: skip
    average = read_record(store, store.resolve(meeting.average))
    left = {x["client"]: x["why"] for x in average["left_out"]}
    named = records.is_refused(left.get(1)) and "client 1" in left[1]
    alone = [i["client"] for i in average["inputs"]] == [0]
    figures["detected"] += named and alone
    figures["lost"] += not alone or not all(
        torch.equal(mean["fc"][k], good["fc"][k]) for k in good["fc"]
    )
    assert named and alone, (what, average["left_out"])


def _as_before(store: Store, pristine: Store) -> None:
    """Every name of `pristine` bound in `store` as it is there, its blob present (cheaper
    than a copy of the store: a trial damages a record or a name, or drops a name)."""
    from soma.store.errors import CorruptName

    for name in pristine.bound():
        digest = pristine.resolve(name)
        if not store.has(digest):
            store.put(pristine.get(digest))
        try:
            same = store.resolve(name) == digest
        except CorruptName:
            same = False
        if not same:
            store.bind(name, digest)


def _one_of_each_kind(store: Store, names: list[str]) -> list[str]:
    """A name of each kind (client records, tree nodes of a level, holders...: digests and
    indices aside), the one whose digest fewest other names hold (a tree node's holder that
    is not also the averager), to keep the trials few."""
    import re

    held = {n: store.resolve(n) for n in names}
    shared = defaultdict(int)
    for digest in held.values():
        shared[digest] += 1
    kinds: dict[str, str] = {}
    for name in sorted(names, key=lambda n: shared[held[n]]):
        kind = re.sub(r"[0-9a-f]{16,}", "<h>", name)
        kind = re.sub(r"/(client|tree/\d+)/\d+", r"/\1/<i>", kind)
        kinds.setdefault(kind, name)
    return sorted(kinds.values())


def test_every_record_of_a_tree_round_lost_or_its_name_garbled_is_repaired(
    tmp_path: Path,
) -> None:
    """Each record a tree round's names hold (identity, client records, averagings, tree
    nodes, holders), its blob lost or its name file garbled, one at a time; `soma repair`
    and, where the advice says so, the client's rerun."""
    pristine = Store(tmp_path / "pristine")
    threads = [
        threading.Thread(
            target=soma.gather,
            args=(pristine, client_export(0, k)),
            kwargs=dict(
                run="tree",
                round=0,
                clients=5,
                mine=k,
                size=10 + k,
                deadline=60,
                backoff=QUICK,
                tree=2,
            ),
        )  # fmt: skip
        for k in range(5)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    figures = FIGURES["tree round records"]
    rng = random.Random(20)
    store = Store(tmp_path / "store")
    shutil.copytree(pristine.directory, store.directory, symlinks=True, dirs_exist_ok=True)
    for name in _one_of_each_kind(pristine, pristine.bound("tree/")):
        for how in ("lose", "garble"):
            _as_before(store, pristine)  # each trial starts from the round as it was
            held = store.resolve(name)
            if how == "lose":
                os.unlink(store.blob_path(held))
            else:
                (store.directory / "names" / name).write_text(f"garbled {rng.random()}\n")
            figures["trials"] += 1
            figures["faults"] += 1
            report = health.verify(store)
            figures["detected"] += not report.clean
            repaired = health.repair(store)
            for problem in repaired.left:
                figures["rerun"] += rerun(store, pristine, problem)
            after = health.repair(store)
            figures["repaired"] += not repaired.left
            figures["names dropped"] += sum(r.startswith("the name") for r in repaired.removed)
            figures["lost"] += bool(after.left)
            if after.left:
                kind = "/".join(n if len(n) < 64 else "<key>" for n in name.split("/")[4:])
                figures[f"lost: {how} {kind}"] += 1
            else:
                assert health.verify(store).clean
