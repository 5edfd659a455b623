"""Signed records (soma.round.signing): with a roster, a record is used only when its writer
signed it; a forged, moved or changed record is refused naming the client and the key."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch

pytest.importorskip("cryptography")

from soma import health  # noqa: E402
from soma.config.spec import RunSpec  # noqa: E402
from soma.round import Meeting, average_round, contribute, drop  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.round.signing import Signing, SigningError, make_keys, read_roster  # noqa: E402
from soma.run.simulate import simulate  # noqa: E402
from soma.secagg import phases  # noqa: E402
from soma.secagg import roster as rosters  # noqa: E402
from soma.secagg.consistency import SplitRoster, confirm  # noqa: E402
from soma.secagg.messages import put_signed  # noqa: E402
from soma.secagg.session import Secrets, Session  # noqa: E402
from soma.store import Store  # noqa: E402
from soma.timing import LEASE  # noqa: E402

CLIENTS = 3
OUTSIDER = 7  # a key pair whose public key is on no roster


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    roster = {str(k): make_keys(folder, k)[1] for k in range(CLIENTS)}
    make_keys(folder, OUTSIDER)
    (folder / "roster.json").write_text(json.dumps(roster))
    return folder


def signing_of(keys: Path) -> Signing:
    return Signing.of(read_roster(keys / "roster.json"), str(keys / "{client}.key"))


def pretending(keys: Path, client: int, key_of: int) -> Signing:
    """A writer that signs client `client`'s records with `key_of`'s key (a forger's view)."""
    public = (keys / f"{key_of}.pub").read_text().strip()
    return Signing.of({client: public}, str(keys / f"{key_of}.key"))


def export(x: float) -> dict:
    return {"fc": {"w": torch.full((3,), x)}}


def client_value(store: Store, x: float, client: int) -> dict:
    return {"client": client, "size": 1.0, "weights": store.put_value(export(x)),
            "extra": None, "own": None, "by": None}  # fmt: skip


# --- soma keys ------------------------------------------------------------------------------


def test_soma_keys_makes_a_private_key_only_its_owner_reads_and_prints_the_roster(tmp_path, capsys):
    from soma.cli import main

    out = str(tmp_path / "k")
    assert main(["keys", "--out", out, "--client", "0-1"]) == 0
    roster = json.loads(capsys.readouterr().out)
    assert sorted(roster) == ["0", "1"]
    for k in (0, 1):
        assert stat.S_IMODE(os.stat(tmp_path / "k" / f"{k}.key").st_mode) == 0o600
        assert (tmp_path / "k" / f"{k}.pub").read_text().strip() == roster[str(k)]
    assert main(["keys", "--out", out, "--client", "1-2"]) == 1
    assert "1.key exist" in capsys.readouterr().err
    assert not (tmp_path / "k" / "2.key").exists(), "refused before any key was made"


# --- a plain round: forged client records, forged averages ----------------------------------


def _forge(store: Store, meeting: Meeting, keys: Path, how: str) -> None:
    """Client 1's record, as a forger who holds no key of client 1 writes it."""
    name = meeting.client(1)
    value = client_value(store, 9.0, 1)
    if how == "unsigned":
        store.keep(name, value)
    elif how == "key not on the roster":
        signatures.keep(store, pretending(keys, 1, OUTSIDER), value, name=name, by=1)
    elif how == "another client's key":
        signatures.keep(store, pretending(keys, 1, 2), value, name=name, by=1)
    elif how == "changed after signing":
        signed = signatures.signed(store, meeting.signing, value, name=name, by=1)
        store.keep(name, {**signed, "weights": store.put_value(export(99.0))})
    elif how == "moved from another round":
        earlier = Meeting("forged", 0, CLIENTS, signing=meeting.signing)
        digest = signatures.keep(store, earlier.signing, value, name=earlier.client(1), by=1)
        store.bind(name, digest)


@pytest.mark.parametrize(
    "how",
    [
        "unsigned",
        "key not on the roster",
        "another client's key",
        "changed after signing",
        "moved from another round",
    ],
)
def test_a_forged_client_record_is_refused_naming_the_client_and_the_key(tmp_path, keys, how):
    store, signing = Store(tmp_path / "store"), signing_of(keys)
    meeting = Meeting("forged", 1, CLIENTS, signing=signing)
    contribute(store, meeting, export(1.0), mine=0, size=1.0)
    _forge(store, meeting, keys, how)
    drop(store, meeting, mine=2, why="failed: test")
    with pytest.raises(SigningError) as refused:
        average_round(store, meeting, deadline=5, lease=LEASE)
    message = str(refused.value)
    assert "client 1's record" in message
    expected = {
        "unsigned": "is unsigned",
        "key not on the roster": "which is not on the roster",
        "another client's key": "signed by client 2's key",
        "changed after signing": "does not verify",
        "moved from another round": "does not verify",
    }[how]
    assert expected in message
    if how != "unsigned":
        assert "key " in message
    assert store.resolve(meeting.average) is None, "refused before anything was averaged"


@pytest.mark.parametrize("how", ["unsigned", "key not on the roster"])
def test_an_average_signed_by_nobody_on_the_roster_is_refused(tmp_path, keys, how):
    store, signing = Store(tmp_path / "store"), signing_of(keys)
    meeting = Meeting("forged", 0, CLIENTS, signing=signing)
    for k in range(CLIENTS):
        contribute(store, meeting, export(float(k)), mine=k, size=1.0)
    forged = {"run": "forged", "round": 0, "clients": CLIENTS, "strategy": "fedavg",
              "left_out": [], "inputs": [], "weights": store.put_value(export(42.0))}  # fmt: skip
    if how == "unsigned":
        store.claim(meeting.average, store.put_value(forged))
    else:
        outsider = pretending(keys, 0, OUTSIDER)
        signatures.keep(store, outsider, forged, name=meeting.average, by=0)
    with pytest.raises(SigningError) as refused:
        average_round(store, meeting, deadline=5, lease=LEASE)
    message = str(refused.value)
    assert "the average record" in message
    # refused for its signature, before its content is looked at (soma.round.verify)
    assert ("is unsigned" if how == "unsigned" else "which is not on the roster") in message


def test_the_workflows_inputs_must_be_what_the_clients_signed(tmp_path, keys):
    """The workflow's average job takes its inputs from receipts: with a roster, each must be
    what its client's signed record in the store says."""
    from soma.round import Input, average_inputs

    store, signing = Store(tmp_path / "store"), signing_of(keys)
    meeting = Meeting("forged", 0, 2, signing=signing)
    made = [contribute(store, meeting, export(float(k)), mine=k, size=1.0) for k in range(2)]
    other = store.put_value(export(42.0))
    inputs = [Input(0, made[0].weights, 1.0), Input(1, other, 1.0)]
    with pytest.raises(SigningError, match="client 1's signed record .* is not the input"):
        average_inputs(store, meeting, inputs, deadline=5, lease=LEASE)
    assert store.resolve(meeting.average) is None
    inputs[1] = Input(1, made[1].weights, 1.0)
    average_inputs(store, meeting, inputs, deadline=5, lease=LEASE)


def test_a_whole_signed_run_trains_the_bits_of_an_unsigned_one_and_signs_every_record(
    tmp_path, keys
):
    roster, key = keys / "roster.json", str(keys / "{client}.key")
    run = dict(clients=CLIENTS, rounds=2, deadline=30)
    signed = simulate("soma.tasks.control", **run, roster=roster, keys=key, store=tmp_path / "s")
    plain = simulate("soma.tasks.control", **run, store=tmp_path / "p")
    assert signed.weights == plain.weights
    store = Store(tmp_path / "s")
    for name in store.bound("simulation"):
        if name.endswith(("/average", *(f"/client/{k}" for k in range(CLIENTS)))):
            assert "signed" in store.recall(name), name


def test_a_signed_secure_run_signs_every_message_and_ends_like_an_unsigned_one(tmp_path, keys):
    roster, key = keys / "roster.json", str(keys / "{client}.key")
    run = dict(clients=CLIENTS, rounds=1, deadline=30, secure_aggregation=2)
    signed = simulate("soma.tasks.control", **run, roster=roster, keys=key, store=tmp_path / "s")
    store = Store(tmp_path / "s")
    names = store.bound("simulation")
    for phase in ("keys", "shares", "masked", "confirmed", "reveal"):
        mine = [n for n in names if f"/secagg/{phase}/" in n]
        assert len(mine) == CLIENTS, phase
        assert all("signed" in store.recall(n, lazy=True) for n in mine), phase
    plain = simulate("soma.tasks.control", **run)
    assert signed.weights == plain.weights, "the masks cancel exactly, signed or not"


# --- secure aggregation: a forged message, a split roster -----------------------------------


def _session(tmp_path: Path, keys: Path, prefix: str = "run/secagg") -> tuple[Store, Session]:
    session = Session(prefix, (0, 1, 2), 2, signing=signing_of(keys))
    return Store(tmp_path / "store"), session


def test_a_forged_secure_aggregation_message_is_refused_before_a_roster_takes_it(tmp_path, keys):
    store, session = _session(tmp_path, keys)
    mine = {k: phases.advertise(store, session, k) for k in (0, 2)}
    forged = Secrets(session, 1).public()
    store.claim(session.name("keys", 1), store.put_value(forged))  # unsigned
    with pytest.raises(SigningError) as refused:
        phases.share(store, session, mine[0], deadline=5)
    assert "client 1's message" in str(refused.value) and "unsigned" in str(refused.value)
    assert store.resolve(session.name("roster", "keys")) is None


def test_clients_shown_different_survivors_refuse_to_reveal(tmp_path, keys):
    """Bonawitz et al.'s consistency check: client 0 saw every client survive, client 1 was
    shown a roster without client 2 (the store's writer rebound it); client 0 refuses before
    it reveals anything, naming client 1."""
    store, session = _session(tmp_path, keys)
    secrets = {k: phases.advertise(store, session, k) for k in range(3)}
    for k in range(3):
        phases.share(store, session, secrets[k], deadline=5)
    for k in range(3):
        phases.masked_input(store, session, secrets[k], export(float(k)), 1.0, deadline=5)
    seen = confirm(store, session, secrets[0], deadline=5)
    name = session.name("roster", "masked")
    present = [[k, d] for k, d in rosters.read_roster(store, session, "masked", seen).items()]
    other = {"phase": "masked", "expected": [0, 1, 2], "present": present[:2]}
    store.bind(name, put_signed(store, session, other, name, 0))
    confirm(store, session, secrets[1], deadline=5)
    store.bind(name, seen)
    with pytest.raises(SplitRoster) as refused:
        phases.reveal(store, session, secrets[0], deadline=5)
    assert "client 1 signed other survivors" in str(refused.value)
    assert store.resolve(session.name("reveal", 0)) is None, "nothing revealed"


# --- the run's settings, refused before anything is written ---------------------------------


def _spec(folder: Path, **given) -> RunSpec:
    base = dict(run="r", task="soma.tasks.control", clients=CLIENTS, rounds=1, mine=(0,),
                roster=str(folder / "roster.json"), keys=str(folder / "{client}.key"))  # fmt: skip
    return RunSpec(**{**base, "given": "args", **given})


def test_a_roster_and_keys_that_cannot_sign_are_refused_by_their_option(tmp_path, keys):
    from soma.config.spec import BadArgument as SigningError  # the refusal names the option

    _spec(keys).check()
    with pytest.raises(SigningError, match=r"--roster: clients 3 of the run's 4"):
        _spec(keys, clients=4).check()
    with pytest.raises(SigningError, match=r"--keys: .*holds key .*client 2's"):
        _spec(keys, keys=str(keys / "2.key")).check()
    loose = tmp_path / "0.key"
    loose.write_bytes((keys / "0.key").read_bytes())
    loose.chmod(0o644)
    with pytest.raises(SigningError, match=r"--keys: .*readable by others"):
        _spec(keys, keys=str(loose)).check()
    with pytest.raises(SigningError, match=r"--keys given without a roster"):
        _spec(keys, roster=None).check()


def test_repair_rebuilds_signed_weights_but_never_forges_a_lost_signed_record(tmp_path, keys):
    """A lost average record of a signed run is not remade (its writer's signature is not the
    repairer's to make); its weights are, checked by the digest the signed record names."""
    run = dict(clients=CLIENTS, rounds=1, deadline=30, roster=keys / "roster.json")
    simulate("soma.tasks.control", **run, keys=str(keys / "{client}.key"), store=tmp_path / "s")
    store = Store(tmp_path / "s")
    (name,) = [n for n in store.bound("simulation") if n.endswith("/average")]
    record = store.recall(name)
    store.blob_path(record["weights"]).unlink()
    assert health.repair(store).clean
    store.blob_path(store.resolve(name)).unlink()
    report = health.repair(store)
    assert not report.clean and not report.rebuilt
