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
from soma.round.verify import AverageRefused, meeting_from_about, verify_average  # noqa: E402
from soma.store import Store  # noqa: E402

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


def _publish_garbage(store: Store, meeting: Meeting, by: int, weights: dict) -> str:
    """What roster member `by` can do with its own key: publish an average of its choosing,
    listing the round's real inputs, before anyone averages."""
    inputs = []
    for k in meeting.members:
        digest = store.resolve(meeting.client(k))
        record = records.read_client(store, digest, client=k, name=meeting.client(k))
        inputs.append(records.input_entry(k, record.weights, record.size, None, digest))
    record = records.average_record(
        meeting, left_out={}, inputs=inputs, weights=store.put_value(weights), state=None,
        averaged_by={"client": by},
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
        average_round(store, meeting, deadline=5)
    message = str(refused.value)
    assert "round 1 of run 'trusted'" in message and "signed by client 2" in message
    assert "fc.b differs" in message, "the first differing tensor, in sorted order"


def test_an_honest_average_published_elsewhere_is_recomputed_and_taken(tmp_path, keys):
    store, meeting = _round(tmp_path, keys)
    mine = average_round(store, meeting, deadline=5)  # computed here
    assert verify_average(store, meeting, mine) is None, "recomputed bit for bit"
    again = Meeting("trusted", 1, CLIENTS, signing=meeting.signing)  # another process's view
    assert average_round(Store(tmp_path / "store"), again, deadline=5) == mine


def test_an_average_that_drops_an_input_it_lists_is_refused(tmp_path, keys):
    store, meeting = _round(tmp_path, keys)
    good = average_round(store, meeting, deadline=5)
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
    digest = average_round(store, meeting, deadline=5)
    why = verify_average(store, meeting, digest)
    assert why is not None and "private noise" in why
