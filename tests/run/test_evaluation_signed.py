"""Federated evaluation's records in a signed run (soma.run.evaluation): `trained/<k>` and
`evaluated/<k>` signed by client k, `federated` by a roster member; whoever settles a round
refuses a forged client record, naming it, before it reaches the round's `federated`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from signed_runs import CLIENTS, make_keys_and_roster, meeting_of, signed_run  # noqa: E402

from soma.round import Meeting, layout  # noqa: E402
from soma.round import signing as signatures  # noqa: E402
from soma.round.signing import Signing, SigningError, read_roster  # noqa: E402
from soma.run.evaluation import settle  # noqa: E402
from soma.store import Store  # noqa: E402


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    make_keys_and_roster(folder)
    return folder


def _meeting(store: Store, prefix: str, keys: Path) -> Meeting:
    """The round's meeting as its clients held it (its identity, the roster and keys)."""
    about = store.recall(layout.about(prefix))
    fields = {f.name for f in dataclasses.fields(Meeting)} - {"signing"}
    given = {k: v for k, v in about.items() if k in fields}
    if given.get("expected") is not None:
        given["expected"] = tuple(given["expected"])
    signing = Signing.of(read_roster(keys / "roster.json"), str(keys / "{client}.key"))
    meeting = Meeting(**given, signing=signing)
    assert meeting.prefix == prefix
    return meeting


def test_every_evaluation_record_is_signed_by_its_writer(tmp_path, keys):
    store = signed_run(tmp_path / "s", keys)
    reader = Signing.of(read_roster(keys / "roster.json"), None)
    prefix = meeting_of(store, 0)
    for k in range(CLIENTS):
        for name in (layout.evaluated(prefix, k, CLIENTS), layout.trained(prefix, k, CLIENTS)):
            digest = store.resolve(name)
            signatures.check(store, reader, digest, name=name, writer=k, what=name)
            other = (k + 1) % CLIENTS
            with pytest.raises(SigningError, match=f"not client {other}'s"):
                signatures.check(store, reader, digest, name=name, writer=other, what=name)
    name = layout.federated(prefix)
    signatures.check(store, reader, store.resolve(name), name=name, writer=None, what=name)


@pytest.mark.parametrize("kind", ["evaluated", "trained"])
def test_settling_refuses_a_forged_client_record_naming_it(tmp_path, keys, kind):
    store = signed_run(tmp_path / "s", keys)
    prefix = meeting_of(store, 0)
    meeting = _meeting(store, prefix, keys)
    kept = store.recall(layout.federated(prefix))
    name = getattr(layout, kind)(prefix, 1, CLIENTS)
    forged = {k: v for k, v in store.recall(name).items() if k != "signed"}
    forged["metrics"] = {m: 0.0 for m in forged["metrics"]}
    store.keep(name, forged)
    with pytest.raises(SigningError, match=f"client 1's .* record .*{kind}/1.* is unsigned"):
        settle(store, meeting, kept["weights"], list(range(CLIENTS)))
    assert store.recall(layout.federated(prefix)) == kept, "the round's record stands"
