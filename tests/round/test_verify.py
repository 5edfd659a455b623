"""Averages checked by those who use them (soma.round.verify): a garbage average signed by a
roster member is refused by the next clients, naming the round, the signer and the tensor;
an honest one published by another process is recomputed bit for bit and taken."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("cryptography")

from signed_runs import CLIENTS, make_keys_and_roster  # noqa: E402

from soma.round import Meeting, average_round, contribute, records  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.round.signing import Signing, SigningError, read_roster  # noqa: E402
from soma.round.verify import (  # noqa: E402
    IDENTITY_FIELDS,
    AverageRefused,
    meeting_from_about,
    verify_average,
)
from soma.store import Store  # noqa: E402
from soma.timing import LEASE  # noqa: E402

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    make_keys_and_roster(folder)
    return folder


def signing_of(keys: Path, averagers=None) -> Signing:
    return Signing.of(read_roster(keys / "roster.json"), str(keys / "{client}.key"), averagers)


def export(x: float) -> dict:
    return {"fc": {"w": torch.full((3,), x), "b": torch.tensor([x])}}


def _publish_garbage(store: Store, meeting: Meeting, by: int, weights: dict, **claims) -> str:
    """What roster member `by` can do with its own key: publish an average of its choosing,
    listing the round's real inputs, before anyone averages; its record may claim `claims`
    too (a tree, a secure sum)."""
    inputs = []
    for k in meeting.members:
        digest = store.resolve(meeting.client(k))
        record = records.read_client(store, digest, client=k, name=meeting.client(k))
        inputs.append(records.input_entry(k, record.weights, record.size, None, digest))
    record = records.average_record(
        meeting, left_out={}, inputs=inputs, weights=store.put_value(weights), state=None,
        averaged_by={"client": by}, **claims,
    )  # fmt: skip
    return signatures.keep(store, meeting.signing, record.value(), name=meeting.average, by=by)


def _round(tmp_path, keys, averagers=None) -> tuple[Store, Meeting]:
    store = Store(tmp_path / "store")
    meeting = Meeting("trusted", 1, CLIENTS, signing=signing_of(keys, averagers))
    for k in range(CLIENTS):
        contribute(store, meeting, export(float(k)), mine=k, size=1.0 + k)
    return store, meeting


def test_a_garbage_average_signed_by_a_roster_member_is_refused_by_the_next_clients(tmp_path, keys):
    store, meeting = _round(tmp_path, keys)
    _publish_garbage(store, meeting, 2, {"fc": {"w": torch.zeros(3), "b": torch.tensor([1.0])}})
    with pytest.raises(AverageRefused) as refused:
        average_round(store, meeting, deadline=5, lease=LEASE)
    message = str(refused.value)
    assert "round 1 of run 'trusted'" in message and "signed by client 2" in message
    assert "fc.b differs" in message, "the first differing tensor, in sorted order"
    assert "CPU capability" in message, "where it was recomputed, for whoever doubts it"


def test_an_honest_average_published_elsewhere_is_recomputed_and_taken(tmp_path, keys):
    store, meeting = _round(tmp_path, keys)
    mine = average_round(store, meeting, deadline=5, lease=LEASE)  # computed here
    assert verify_average(store, meeting, mine) is None, "recomputed bit for bit"
    again = Meeting("trusted", 1, CLIENTS, signing=meeting.signing)  # another process's view
    assert average_round(Store(tmp_path / "store"), again, deadline=5, lease=LEASE) == mine


def test_an_average_that_drops_an_input_it_lists_is_refused(tmp_path, keys):
    store, meeting = _round(tmp_path, keys)
    good = average_round(store, meeting, deadline=5, lease=LEASE)
    record = records.read_average(store, good)
    forged = {**record.value(), "inputs": record.inputs[:2]}  # client 2 silently missing
    forged.pop(signatures.SIGNED, None)
    digest = signatures.put(store, meeting.signing, forged, name=meeting.average, by=1)
    with pytest.raises(AverageRefused, match=r"not each of the members \[0, 1, 2\] once"):
        verify_average(store, meeting, digest)


def test_an_average_signed_by_a_member_who_may_not_average_is_refused(tmp_path, keys):
    store, meeting = _round(tmp_path, keys, averagers=[0])
    _publish_garbage(store, meeting, 0, export(1.0))  # any weights: who signed is refused first
    honest = Meeting("trusted", 1, CLIENTS, signing=signing_of(keys, [0]))
    digest = store.resolve(honest.average)
    forged = records.read_average(store, digest).value()
    forged.pop(signatures.SIGNED)
    other = signatures.put(store, Signing.of(dict(honest.signing.roster), honest.signing.keys,
                                             None), forged, name=honest.average, by=1)  # fmt: skip
    with pytest.raises(SigningError, match=r"not among the run's averagers \[0\]"):
        verify_average(store, honest, other, mode="signature")


def test_the_meeting_rebuilt_from_its_about_record_is_the_meeting(tmp_path, keys):
    store, meeting = _round(tmp_path, keys)
    rebuilt = meeting_from_about(store, "trusted", 1, meeting.key, meeting.signing)
    assert rebuilt.key == meeting.key and rebuilt.members == meeting.members
    with pytest.raises(SigningError, match="roster"):
        meeting_from_about(store, "trusted", 1, meeting.key, None)


def test_an_average_with_private_noise_is_said_not_recomputed_and_taken(tmp_path, keys):
    store = Store(tmp_path / "store")
    options = {"clip": 1.0, "noise_multiplier": 1.0, "clients_per_round": CLIENTS}
    start = store.put_value(export(0.0))
    meeting = Meeting("noisy", 1, CLIENTS, start=start, strategy="dp_fedavg", options=options,
                      signing=signing_of(keys))  # fmt: skip
    for k in range(CLIENTS):
        contribute(store, meeting, export(0.1 * k), mine=k, size=1.0)
    digest = average_round(store, meeting, deadline=5, lease=LEASE)
    why = verify_average(store, meeting, digest)
    assert why is not None and "private noise" in why


def _forged(store: Store, meeting: Meeting, weights: dict, **claims) -> str:
    """Roster member 1 publishes `weights` as the round's average, claiming `claims`."""
    return _publish_garbage(store, meeting, 1, weights, **claims)


GARBAGE = {"fc": {"w": torch.full((3,), 1e15), "b": torch.tensor([-1e15])}}


@pytest.mark.parametrize(
    "claims, field",
    [
        ({"tree": {"fan_in": 2, "mean": "0" * 64, "weight": 6.0}}, "tree"),
        ({"secure": {"sum": "0" * 64, "threshold": 2, "error_bound": 0.0}}, "secure"),
    ],
    ids=["tree", "secure"],
)
def test_an_average_that_says_it_is_a_tree_or_a_secure_sum_in_a_flat_round_is_refused(
    tmp_path, keys, claims, field
):
    """What a record says it is never chooses how it is checked: the meeting does."""
    store, meeting = _round(tmp_path, keys)
    digest = _forged(store, meeting, GARBAGE, **claims)
    with pytest.raises(AverageRefused, match=rf"says {field} .*; the meeting's is None"):
        verify_average(store, meeting, digest)
    with pytest.raises(AverageRefused, match=field):
        average_round(store, meeting, deadline=5, lease=LEASE)  # a client about to train from it


def test_every_field_of_the_rounds_identity_is_compared(tmp_path, keys):
    store, meeting = _round(tmp_path, keys)
    good = records.read_average(store, average_round(store, meeting, deadline=5, lease=LEASE))
    assert set(IDENTITY_FIELDS) >= {"run", "round", "meeting", "strategy", "options", "start"}
    for field in IDENTITY_FIELDS:
        value = getattr(good, field)
        other = "x" if isinstance(value, str) or value is None else value
        other = {"forged": 1} if isinstance(value, dict) else other
        other = value + 1 if isinstance(value, int) else other
        other = [*value, 9] if isinstance(value, list) else other
        forged = {**good.value(), field: other}
        forged.pop(signatures.SIGNED, None)
        digest = signatures.put(store, meeting.signing, forged, name=meeting.average, by=1)
        with pytest.raises(AverageRefused, match=rf"says {field} "):
            verify_average(store, meeting, digest)


def _tree_round(tmp_path, keys) -> tuple[Store, Meeting]:
    store = Store(tmp_path / "store")
    meeting = Meeting("tree", 1, CLIENTS, tree=2, signing=signing_of(keys))
    for k in range(CLIENTS):
        contribute(store, meeting, export(float(k)), mine=k, size=1.0 + k)
    return store, meeting


def test_a_tree_average_is_recomputed_node_by_node(tmp_path, keys):
    store, meeting = _tree_round(tmp_path, keys)
    digest = average_round(store, meeting, deadline=5, lease=LEASE)
    assert records.read_average(store, digest).tree is not None, "averaged as a tree"
    other = Meeting("tree", 1, CLIENTS, tree=2, signing=meeting.signing)
    assert verify_average(Store(tmp_path / "store"), other, digest) is None, "recomputed"


def test_a_garbage_tree_average_is_refused(tmp_path, keys):
    """A member publishes a tree record whose root is a mean of its choosing: the nodes
    recomputed from the signed inputs give another root."""
    store, meeting = _tree_round(tmp_path, keys)
    fake_root = store.put_value(GARBAGE)
    digest = _forged(store, meeting, GARBAGE, tree={"fan_in": 2, "mean": fake_root, "weight": 6.0})
    with pytest.raises(AverageRefused, match="tree root"):
        verify_average(store, meeting, digest)
