"""Meetings of one round that differ, with a roster (soma.round.conflicts): a rival meeting and a
note are believed only when a roster member signed them, so whoever can write the store but
holds no roster key stops no waiting client; a client that really joined another meeting is
still told at once. Real folder stores, one process (the rivals' writers are alive)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("cryptography")

import soma.round  # noqa: E402
from soma.round import Backoff, Meeting, RoundIncomplete, average_round, contribute, holders, layout  # noqa: E402  # noqa: E402
from soma.round.signing import Signing, make_keys, read_roster  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.timing import LEASE  # noqa: E402

QUICK = Backoff(first=0.01, cap=0.1)
OUTSIDER = 7


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    roster = {str(k): make_keys(folder, k)[1] for k in range(2)}
    make_keys(folder, OUTSIDER)
    (folder / "roster.json").write_text(json.dumps(roster))
    return folder


def signing_of(keys: Path) -> Signing:
    return Signing.of(read_roster(keys / "roster.json"), str(keys / "{client}.key"))


def weights(seed: int) -> dict:
    return {"fc": {"w": torch.full((3,), float(seed))}}


def late(store: Store, meeting: Meeting, k: int, after: float) -> threading.Thread:
    """Client `k` contributes after `after` seconds (the waiting client looks elsewhere first)."""

    def come() -> None:
        time.sleep(after)
        contribute(store, meeting, weights(k), mine=k)

    thread = threading.Thread(target=come, daemon=True)
    thread.start()
    return thread


def assert_averaged_with_client_1_late(store: Store, mine: Meeting) -> None:
    """Client 0 contributes, client 1 comes 1.5 s later: the round is averaged, by this
    process, whatever the forger left (it stopped no one)."""
    contribute(store, mine, weights(0), mine=0)
    coming = late(store, mine, 1, after=1.5)
    digest = average_round(store, mine, deadline=30, backoff=QUICK, lease=LEASE)
    coming.join()
    assert store.resolve(mine.average) == digest


def gone_writer(store: Store, name: str) -> None:
    """Make the record at `name` a gone process's (a crashed run), as the finder sees it."""
    gone = holders.me()
    gone["pid_start"] = -1
    store.keep(name, {**store.recall(name), "by": gone})


@pytest.mark.fast
@pytest.mark.parametrize("how", ["unsigned", "key not on the roster"])
def test_a_forged_rival_meeting_stops_no_signed_round(tmp_path, keys, how) -> None:
    store, signing = Store(tmp_path / "store"), signing_of(keys)
    mine = Meeting("r", 0, 2, signing=signing)
    # the forger's rival meeting of the round, its about and client 1's record written by a
    # live process: unsigned, or signed with a key of its own that it says is client 1's
    public = (keys / f"{OUTSIDER}.pub").read_text().strip()
    forged = {1: public} if how != "unsigned" else None
    theirs = None if forged is None else Signing.of(forged, str(keys / f"{OUTSIDER}.key"))
    rival = Meeting("r", 0, 2, config={"seed": 666}, signing=theirs)
    contribute(store, rival, weights(9), mine=1)
    assert_averaged_with_client_1_late(store, mine)


@pytest.mark.fast
def test_a_forged_apart_note_stops_no_signed_round(tmp_path, keys) -> None:
    store, signing = Store(tmp_path / "store"), signing_of(keys)
    mine = Meeting("r", 0, 2, signing=signing)
    # a genuine rival from a crashed run (its writer gone: no rival by itself) ...
    rival = Meeting("r", 0, 2, config={"seed": 2}, signing=signing)
    contribute(store, rival, weights(1), mine=1)
    gone_writer(store, rival.client(1))
    # ... and a note the forger left this meeting, as if the rival had found it
    note = {"client": 0, "at": time.time(), "by": holders.me()}
    store.keep(layout.note(mine.prefix, rival.key), note)
    assert_averaged_with_client_1_late(store, mine)


@pytest.mark.fast
def test_a_signed_client_in_another_meeting_is_still_told_and_its_note_heeded(
    tmp_path, keys
) -> None:
    store, signing = Store(tmp_path / "store"), signing_of(keys)
    mine = Meeting("r", 0, 2, config={"seed": 1}, signing=signing)
    theirs = Meeting("r", 0, 2, config={"seed": 2}, signing=signing)
    contribute(store, theirs, weights(1), mine=1)  # still training its other clients
    contribute(store, mine, weights(0), mine=0)
    with pytest.raises(soma.round.MeetingsDiffer, match="client 1 joined with seed 2"):
        average_round(store, mine, deadline=5, backoff=QUICK, lease=LEASE)
    # the finder has stopped: only its note, signed, tells the rival
    gone_writer(store, mine.client(0))
    (note,) = store.bound(layout.notes(theirs.prefix))
    assert "signed" in store.recall(note)
    with pytest.raises(soma.round.MeetingsDiffer, match="client 0 joined with seed 1"):
        average_round(store, theirs, deadline=5, backoff=QUICK, lease=LEASE)
    # and the note unsigned (a forger's copy) would have stopped nobody
    store.keep(note, {k: v for k, v in store.recall(note).items() if k != "signed"})
    with pytest.raises(RoundIncomplete, match="client 0 never came"):
        average_round(store, theirs, deadline=1.5, backoff=QUICK, lease=LEASE)
