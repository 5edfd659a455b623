"""Issue 31: under a quorum, a refused input is left out, not fatal. One record written for
client 2 by anything but `contribute` (a NaN, no weights, a lying tensor header, another
network...) used to stop the round for everyone; now every process that finds the round
ready refuses the same clients, the rest are averaged if they are still the quorum, and the
average's record says who was refused and why (`input refused: ...`). Where all must come,
the refusal still stops the round; below the quorum, RoundIncomplete names the refused.

Real stores on disk, records written as bytes into the store by hand."""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from figures import FIGURES, printed
from helpers import overlapping_export, same_weights

from soma.round import (
    Backoff,
    Input,
    Meeting,
    RoundError,
    RoundIncomplete,
    average_inputs,
    average_round,
    contribute,
    drop,
    read_record,
    weights_of_average,
)
from soma.round.records import is_refused
from soma.store import Store, codecs
from soma.timing import LEASE

torch.set_num_threads(1)
QUICK = Backoff(first=0.002, cap=0.02)


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    yield
    printed(request, ["hostile records (quorum)"])


def weights(seed: int, rows: int = 4) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"fc": {"w": torch.randn(rows, 3, generator=g), "b": torch.randn(rows, generator=g)}}


def nan_weights(store: Store) -> str:
    bad = weights(2)
    bad["fc"]["w"][1, 2] = float("nan")
    return store.put_value(bad)  # the store keeps anything: only `contribute` refuses a NaN


def lying_header(store: Store, shape: list[int], offsets: list[int]) -> str:
    """An export whose tensor file's header lies (it hashes right: it was put as bytes)."""
    header = {"w": {"dtype": "F32", "shape": shape, "data_offsets": offsets}}
    raw = json.dumps(header).encode()
    blob = store.put(struct.pack("<Q", len(raw)) + raw + bytes(8))
    return store.put(codecs.record_bytes({"fc": {"$tensors": blob}}, None))


def record(weights: object, client: int = 2, **more) -> dict:
    return {"client": client, "size": 10, "weights": weights, "extra": None, "own": None,
            "by": None, **more}  # fmt: skip


def write_by_hand(store: Store, meeting: Meeting, value: object) -> None:
    """Client 2's record, as bytes in the store under its name: not through `contribute`
    (bytes as they are, a value as a soma record)."""
    raw = value if isinstance(value, bytes) else codecs.record_bytes(value, None)
    store.bind(meeting.client(2), store.put(raw))


def meeting(store: Store, run: str = "r", clients: int = 3, **kw) -> Meeting:
    start = store.put_value(weights(99))
    return Meeting(run, 0, clients, start=start, **kw)


def honest(store: Store, m: Meeting, clients=(0, 1)) -> None:
    for k in clients:
        contribute(store, m, weights(k), mine=k, size=10 + k)


def race(store: Store, m: Meeting, processes: int = 2) -> list[str]:
    """`average_round` by each honest client at once (threads); the digests they leave with."""
    out: list[object] = [None] * processes

    def one(i: int) -> None:
        try:
            out[i] = average_round(store, m, deadline=10, backoff=QUICK, lease=LEASE)
        except Exception as error:  # noqa: BLE001 - the test says which
            out[i] = error

    threads = [threading.Thread(target=one, args=(i,)) for i in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x in out:
        if isinstance(x, Exception):
            raise x
    return out  # type: ignore[return-value]


def average_of_two(tmp_path: Path, m: Meeting) -> dict:
    """What averaging just clients 0 and 1 gives, in a store of its own."""
    other = Store(tmp_path / "alone")
    two = Meeting("two", 0, 2, start=other.put_value(weights(99)))
    honest(other, two)
    return weights_of_average(
        other, average_round(other, two, deadline=5, backoff=QUICK, lease=LEASE)
    )


def claimed(store: Store, m: Meeting) -> list[str]:
    return [n for n in store.bound(m.prefix) if "/inputs/" in n or n.endswith("/average")]


def refused_entry(store: Store, digest: str) -> dict:
    average = read_record(store, digest)
    assert [i["client"] for i in average["inputs"]] == [0, 1]
    (left,) = average["left_out"]
    assert left["client"] == 2 and is_refused(left["why"]), left
    return left


# --- under a quorum, left out ------------------------------------------------------------------


def test_under_a_quorum_a_nan_record_is_left_out_and_the_honest_two_are_averaged(
    tmp_path,
) -> None:
    store = Store(tmp_path / "store")
    m = meeting(store, quorum=2)
    honest(store, m)
    write_by_hand(store, m, record(nan_weights(store)))
    digests = race(store, m)
    assert len(set(digests)) == 1, "both honest clients leave with the one average"
    assert same_weights(weights_of_average(store, digests[0]), average_of_two(tmp_path, m))
    why = refused_entry(store, digests[0])["why"]
    assert why.startswith("input refused: round 0 of run 'r': client 2's weights ")
    assert "NaN or infinite" in why and repr(m.client(2)) in why
    assert len([n for n in store.bound(m.prefix) if "/computed/" in n]) == 1


def test_under_a_quorum_a_record_without_weights_is_left_out(tmp_path) -> None:
    store = Store(tmp_path / "store")
    m = meeting(store, quorum=2)
    honest(store, m)
    write_by_hand(store, m, {"client": 2, "size": 10})
    digests = race(store, m)
    assert same_weights(weights_of_average(store, digests[0]), average_of_two(tmp_path, m))
    why = refused_entry(store, digests[0])["why"]
    assert "input refused: round 0 of run 'r': client 2's record" in why
    assert "has no 'weights'" in why and repr(m.client(2)) in why


def _cases(store: Store) -> dict[str, object]:
    """(what, client 2's record) as a buggy writer or a hostile roster member leaves it."""
    return {
        "infinity": record(
            store.put_value({"fc": {"w": torch.full((4, 3), float("inf")), "b": torch.zeros(4)}})
        ),  # fmt: skip
        "overlapping offsets": record(overlapping_export(store)),
        "a 2^40-element header": record(lying_header(store, [2**20, 2**20], [0, 8])),
        "another shape than the start": record(store.put_value(weights(2, rows=5))),
        "weights not in the store": record("0" * 64),
        "weights not a digest": record(42),
        "another client's record": record(store.put_value(weights(2)), client=0),
        "not a record": [1, 2],
        "not even a soma record": b'{"client": 2, "weights": "nonsense"}',
        "a size that is no size": record(store.put_value(weights(2)), size=-1),
    }


def test_every_kind_of_bad_record_is_left_out_under_a_quorum_naming_the_record(
    tmp_path,
) -> None:
    store = Store(tmp_path / "store")
    figures = FIGURES["hostile records (quorum)"]
    two = None
    for i, (what, value) in enumerate(_cases(store).items()):
        m = meeting(store, run=f"bad{i}", quorum=2)
        two = two or average_of_two(tmp_path, m)
        honest(store, m)
        write_by_hand(store, m, value)
        figures["trials"] += 1
        figures["faults"] += 1
        digest = average_round(store, m, deadline=5, backoff=QUICK, lease=LEASE)
        why = refused_entry(store, digest)["why"]
        figures["detected"] += is_refused(why)
        figures["different"] += not same_weights(weights_of_average(store, digest), two)
        assert f"round 0 of run 'bad{i}'" in why and repr(m.client(2)) in why, (what, why)
        assert same_weights(weights_of_average(store, digest), two), what


def test_each_client_is_compared_to_the_start_not_to_the_first_client(tmp_path) -> None:
    """Client 0 brings another network: it alone is refused, not the two that match the start."""
    store = Store(tmp_path / "store")
    m = meeting(store, quorum=2)
    contribute(store, m, weights(0, rows=5), mine=0, size=10)
    for k in (1, 2):
        contribute(store, m, weights(k), mine=k, size=10)
    average = read_record(store, average_round(store, m, deadline=5, backoff=QUICK, lease=LEASE))
    assert [i["client"] for i in average["inputs"]] == [1, 2]
    (left,) = average["left_out"]
    assert left["client"] == 0 and "two different networks" in left["why"]
    assert "the round's start" in left["why"]


def test_without_a_start_the_network_most_clients_brought_is_the_rounds(tmp_path) -> None:
    store = Store(tmp_path / "store")
    m = Meeting("r", 0, 3, quorum=2)
    contribute(store, m, weights(0, rows=5), mine=0, size=10)
    for k in (1, 2):
        contribute(store, m, weights(k), mine=k, size=10)
    average = read_record(store, average_round(store, m, deadline=5, backoff=QUICK, lease=LEASE))
    assert [i["client"] for i in average["inputs"]] == [1, 2]
    assert average["left_out"][0]["client"] == 0


def test_the_workflows_averaging_leaves_a_refused_input_out_too(tmp_path) -> None:
    """`average_inputs` averages what its client jobs reported: client 2's NaN weights are
    left out under a quorum, and stop the round where all must come."""
    store = Store(tmp_path / "store")
    for quorum in (2, None):
        m = meeting(store, run=f"q{quorum}", quorum=quorum)
        given = [Input(k, store.put_value(weights(k)), 10 + k) for k in (0, 1)]
        given.append(Input(2, nan_weights(store), 12))
        if quorum is None:
            with pytest.raises(RoundError, match=r"client 2's weights .*NaN or infinite"):
                average_inputs(store, m, given, deadline=5, backoff=QUICK, lease=LEASE)
            assert claimed(store, m) == []
            continue
        digest = average_inputs(store, m, given, deadline=5, backoff=QUICK, lease=LEASE)
        assert same_weights(weights_of_average(store, digest), average_of_two(tmp_path, m))
        assert "NaN or infinite" in refused_entry(store, digest)["why"]


# --- where all must come, or below the quorum: the round stops --------------------------------


def test_without_a_quorum_the_same_record_stops_the_round_naming_it(tmp_path) -> None:
    store = Store(tmp_path / "store")
    m = meeting(store)
    honest(store, m)
    write_by_hand(store, m, record(nan_weights(store)))
    with pytest.raises(RoundError, match=r"client 2's weights .*client/2.*NaN or infinite"):
        race(store, m)
    write_by_hand(store, m, {"client": 2, "size": 10})
    with pytest.raises(RoundError, match=r"client 2's record .*has no 'weights'"):
        average_round(store, m, deadline=5, backoff=QUICK, lease=LEASE)
    assert claimed(store, m) == []


def below_the_quorum(tmp_path: Path, bad: Callable[[Store], object]) -> tuple[Store, Meeting]:
    """Quorum 2 of 3: client 0 came, client 1 dropped out, client 2's record is `bad(store)`."""
    store = Store(tmp_path / "store")
    m = meeting(store, quorum=2)
    honest(store, m, clients=(0,))
    drop(store, m, mine=1, why="failed: RuntimeError: boom")
    write_by_hand(store, m, bad(store))
    return store, m


def test_below_the_quorum_round_incomplete_names_the_refused_client_and_why(tmp_path) -> None:
    store, m = below_the_quorum(tmp_path, lambda store: record(nan_weights(store)))
    with pytest.raises(RoundIncomplete) as below:
        average_round(store, m, deadline=5, backoff=QUICK, lease=LEASE)
    message = str(below.value)
    assert "fewer than the quorum of 2" in message and "client 1 failed: RuntimeError" in message
    assert "client 2 input refused: round 0 of run 'r': client 2's weights" in message
    assert "NaN or infinite" in message
    assert below.value.missing == [1, 2]
    assert claimed(store, m) == []


def test_below_the_quorum_with_an_unreadable_record_names_it_at_once(tmp_path) -> None:
    store, m = below_the_quorum(tmp_path, lambda store: {"client": 2, "size": 10})
    with pytest.raises(RoundIncomplete, match=r"client 2 input refused: .*has no 'weights'"):
        average_round(store, m, deadline=5, backoff=QUICK, lease=LEASE)
    assert claimed(store, m) == []


def test_under_a_quorum_a_record_not_signed_by_its_client_is_left_out(tmp_path) -> None:
    """With a roster, client 2's record written by someone without its key (unsigned) is
    its client's refusal: the two signed clients are averaged, the average signed."""
    pytest.importorskip("cryptography")
    from soma.round.signing import Signing, make_keys

    keys = tmp_path / "keys"
    roster = {str(k): make_keys(keys, k)[1] for k in range(3)}
    signing = Signing.of({int(k): v for k, v in roster.items()}, str(keys / "{client}.key"))
    store = Store(tmp_path / "store")
    m = Meeting("signed", 0, 3, start=store.put_value(weights(99)), quorum=2, signing=signing)
    honest(store, m)
    store.keep(m.client(2), record(store.put_value(weights(2))))
    digest = average_round(store, m, deadline=5, backoff=QUICK, lease=LEASE)
    why = refused_entry(store, digest)["why"]
    assert "client 2's record" in why and "unsigned" in why
