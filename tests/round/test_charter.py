"""A signature binds the run, not only its name (soma.round.signing's charter): signed records
copied into another store, where the run has begun, do not verify there; a process with
another roster is refused at its first signed write, naming both rosters."""

from __future__ import annotations

import pytest

pytest.importorskip("cryptography")

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from signed_runs import CLIENTS, make_keys_and_roster  # noqa: E402

from soma.round import Meeting, average_round, contribute, layout  # noqa: E402
from soma.round.signing import Signing, SigningError, read_roster  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.timing import LEASE  # noqa: E402

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    make_keys_and_roster(folder)
    return folder


def signing_of(keys: Path) -> Signing:
    return Signing.of(read_roster(keys / "roster.json"), str(keys / "{client}.key"))


def export(x: float) -> dict:
    return {"fc": {"w": torch.full((3,), x)}}


def _copy(source: Store, target: Store, names: list[str]) -> None:
    """What a writer with no key can do: every blob of `source`, and `names` bound alike."""
    shutil.copytree(source.directory / "blobs", target.directory / "blobs", dirs_exist_ok=True)
    for name in names:
        target.bind(name, source.resolve(name))


def test_signed_records_copied_into_another_store_do_not_verify(tmp_path, keys):
    signing = signing_of(keys)
    meeting = Meeting("copied", 1, CLIENTS, signing=signing)
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    for k in range(CLIENTS):  # the whole round in store A, signed
        contribute(a, meeting, export(float(k)), mine=k, size=1.0)
    average_round(a, meeting, deadline=5, lease=LEASE)
    contribute(b, meeting, export(0.0), mine=0, size=1.0)  # the run begins in store B
    _copy(a, b, [meeting.client(1), meeting.client(2)])
    with pytest.raises(SigningError) as refused:
        average_round(b, meeting, deadline=5, lease=LEASE)
    assert "client 1's record" in str(refused.value)
    assert "another store's run" in str(refused.value)
    assert b.resolve(meeting.average) is None, "nothing averaged from the copies"


def test_a_store_with_signed_records_and_no_charter_is_refused_by_its_readers(tmp_path, keys):
    signing = signing_of(keys)
    meeting = Meeting("uncharted", 1, CLIENTS, signing=signing)
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    for k in range(CLIENTS):
        contribute(a, meeting, export(float(k)), mine=k, size=1.0)
    _copy(a, b, [meeting.client(k) for k in range(CLIENTS)])  # all but the charter
    assert b.resolve(layout.charter("uncharted")) is None
    with pytest.raises(SigningError, match="has no charter"):
        average_round(b, meeting, deadline=5, lease=LEASE)


def test_a_process_with_another_roster_is_refused_at_its_first_signed_write(tmp_path, keys):
    store = Store(tmp_path / "store")
    contribute(store, Meeting("run", 1, CLIENTS, signing=signing_of(keys)), export(0.0), mine=0)
    other = Signing.of(read_roster(keys / "roster.json"), str(keys / "{client}.key"), [0])
    elsewhere = Store(tmp_path / "store")  # another process's view: nothing cached
    with pytest.raises(SigningError) as refused:
        contribute(elsewhere, Meeting("run", 1, CLIENTS, signing=other), export(1.0), mine=1)
    message = str(refused.value)
    assert "charter" in message and "another roster file" in message
    assert other.digest[:12] in message


def test_a_run_with_another_roster_file_is_refused_before_it_writes_naming_the_file(tmp_path, keys):
    from soma.config.configs import ConfigRefused
    from soma.config.spec import RunSpec
    from soma.run.simulate import simulate_spec

    def spec(roster: Path, averagers=None) -> RunSpec:
        return RunSpec(run="anchored", task="soma.tasks.control", clients=CLIENTS, rounds=1,
                       mine=tuple(range(CLIENTS)), roster=str(roster),
                       keys=str(keys / "{client}.key"), averagers=averagers)  # fmt: skip

    store = tmp_path / "store"
    simulate_spec(spec(keys / "roster.json"), store)
    before = sorted(p.name for p in (store / "blobs").rglob("*"))
    with pytest.raises(ConfigRefused) as refused:
        spec(keys / "roster.json", averagers=[0]).check_charter_at(store)
    assert "roster.json" in str(refused.value) and "charter" in str(refused.value)
    with pytest.raises(ConfigRefused, match="another roster file"):
        simulate_spec(spec(keys / "roster.json", averagers=[0]), store)
    assert sorted(p.name for p in (store / "blobs").rglob("*")) == before, "nothing written"
