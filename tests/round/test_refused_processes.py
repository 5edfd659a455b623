"""Issue 31 with real processes racing: two `soma client` processes (clients 0 and 1 of 3,
quorum 2) while a hostile writer leaves a NaN record for client 2 as soon as the round is
announced. Both honest processes exit 0 with the one average, computed once, bit for bit
the average of clients 0 and 1 alone, and its record names client 2 as refused."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from helpers import averagings_per_round, same_weights, soma_processes

from soma.round import (
    Backoff,
    Input,
    Meeting,
    average_inputs,
    layout,
    read_record,
    weights_of_average,
)
from soma.round.records import is_refused
from soma.store import Store, codecs
from soma.timing import LEASE

RUN = "hostile"


def plant_nan_record(folder: Path, stop: threading.Event, planted: list[str]) -> None:
    """Client 2's record, NaN weights of the round's network, written into the store as
    bytes the moment round 0's meeting is announced (never through `contribute`)."""
    store = Store(folder)
    while not stop.is_set():
        abouts = [n for n in store.bound(f"{RUN}/round/0/") if n.endswith("/about")]
        if abouts:
            prefix = abouts[0][: -len("/about")]
            start = store.recall_digest(store.recall(abouts[0])["start"])
            bad = {node: {k: t.clone() for k, t in keys.items()} for node, keys in start.items()}
            tensor = next(
                t for keys in bad.values() for t in keys.values() if t.is_floating_point()
            )
            tensor.view(-1)[0] = float("nan")
            record = {"client": 2, "size": 50, "weights": store.put_value(bad), "extra": None,
                      "own": None, "by": None}  # fmt: skip
            name = layout.client(prefix, 2, 3)
            store.bind(name, store.put(codecs.record_bytes(record, None)))
            planted.append(prefix)
            return
        time.sleep(0.02)


@pytest.mark.slow
def test_two_honest_soma_clients_average_without_a_hostile_nan_record(
    tmp_path, monkeypatch
) -> None:
    # a quorum's deadline must outlast the store's patience and a fault note's grace
    # (soma.timing.check_fault_deadline): this store's patience, 30 s, lets 120 s do
    monkeypatch.setenv("SOMA_STORE_PATIENCE", "30")
    folder = tmp_path / "store"
    stop, planted = threading.Event(), []
    hostile = threading.Thread(target=plant_nan_record, args=(folder, stop, planted))
    hostile.start()
    args = ["client", "--store", str(folder), "--run", RUN, "--rounds", "1", "--clients", "3"]
    args += ["--quorum", "2", "--deadline", "120", "--task", "soma.tasks.digits"]
    for option in ("labels_per_client=5", "model=softmax", "epochs=1"):
        args += ["--option", option]
    try:
        lines = soma_processes(args, ["0", "1"], timeout=300)  # each must exit 0
    finally:
        stop.set()
        hostile.join()
    assert planted, "the hostile record was written"
    (first,), (second,) = lines
    assert first["average"] == second["average"], "both leave with the one average"
    assert averagings_per_round(folder, RUN) == {0: 1}, "computed once"
    store = Store(folder)
    average = read_record(store, first["average"])
    (left,) = average["left_out"]
    assert left["client"] == 2 and is_refused(left["why"]) and "NaN or infinite" in left["why"]
    assert f"round 0 of run {RUN!r}" in left["why"] and "client/2" in left["why"]
    # bit for bit the average of just clients 0 and 1, their inputs averaged again elsewhere
    came = [Input(i["client"], i["weights"], i["size"]) for i in average["inputs"]]
    assert [i.client for i in came] == [0, 1]
    alone = Meeting("two", 0, 2, start=average["start"])
    again = average_inputs(store, alone, came, deadline=30, backoff=Backoff(), lease=LEASE)
    assert same_weights(
        weights_of_average(store, again), weights_of_average(store, first["average"])
    )
