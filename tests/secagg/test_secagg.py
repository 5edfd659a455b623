"""Secure aggregation (soma/secagg): the sum is FedAvg's, and the store gives no client away.

Clients run as threads (each with its own Store on one folder, as separate jobs would) and
as real processes (tests/secagg_worker.py). What is checked:

- the unmasked sum is the size-weighted sum, and its mean soma.fedavg's, within the stated
  quantization bound; the total size is exact;
- a client that dies after sharing is recovered with the threshold of survivors; below it,
  the round is refused naming who dropped out, with the counts;
- nothing in the store is, or correlates with, any client's export: every blob is scanned;
  no share that must stay secret is there in the clear (hex-decoded strings included); a
  masked input written too late stays hidden by its self-mask though its pairwise masks are
  revealed, even to someone who rebuilds them from the store;
- (tests/secagg/test_secagg_pieces.py) exports that cannot be summed are refused before
  anything is written, naming client, node and key; the pieces (masks, shares, the ring).

tests/secagg/mutants_secagg.py breaks each guarantee; tests/test_mutations.py proves these catch it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import communicated, correlated
from secagg_worker import export_of, size_of

import soma
from soma.round import once
from soma.secagg import (
    DEADLINE,
    BelowThreshold,
    FixedPoint,
    LeftOut,
    Secrets,
    Session,
    advertise,
    average,
    check_input,
    crypto,
    masked_input,
    masking,
    masks,
    published,
    received_shares,
    result,
    reveal,
    secure_sum,
    shamir,
    share,
    unmask,
)
from soma.secagg.ring import flat_of, layout_of
from soma.store import Store, codecs
from soma.timing import LEASE

HERE = Path(__file__).resolve().parents[1]
PREFIX = "run/round/0/secagg"
N = 5

# --- helpers ----------------------------------------------------------------------------------


def weighted_of(client: int) -> dict[str, dict[str, torch.Tensor]]:
    """size * export in float64: what the client contributes to the sum."""
    size = size_of(client)
    return {
        n: {k: t.double() * size for k, t in keys.items()} for n, keys in export_of(client).items()
    }


def expected_sum(clients: list[int]) -> tuple[dict, float]:
    total: dict[str, dict[str, torch.Tensor]] = {}
    for k in clients:
        for node, keys in weighted_of(k).items():
            for key, t in keys.items():
                total.setdefault(node, {})[key] = total.get(node, {}).get(key, 0) + t
    return total, float(sum(size_of(k) for k in clients))


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    worst = 0.0
    for node in a:
        assert a[node].keys() == b[node].keys()
        for key in a[node]:
            worst = max(worst, (a[node][key].double() - b[node][key].double()).abs().max().item())
    return worst


def run_threads(jobs: dict[int, Callable[[], object]]) -> dict[int, object]:
    """Run each client's job in its own thread; what each returned, or the exception it raised."""
    out: dict[int, object] = {}

    def run(k: int) -> None:
        try:
            out[k] = jobs[k]()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            out[k] = error

    threads = [threading.Thread(target=run, args=(k,)) for k in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a client hung"
    return out


def phases(
    directory: Path,
    session: Session,
    k: int,
    keep: dict[int, Secrets],
    *,
    stop_after: str | None = None,
    deadline: float = 2.0,
) -> Callable[[], object]:
    """Client k's phases one by one, stopping (as if killed) after `stop_after`; its secrets
    are kept in `keep` for the test to look at (they never leave the process: a test is it)."""

    def job() -> object:
        store = Store(directory)
        export, size = export_of(k), size_of(k)
        check_input(session, k, export, size)
        keep[k] = advertise(store, session, k)
        if stop_after == "advertise":
            return "stopped"
        share(store, session, keep[k], deadline=deadline)
        if stop_after == "share":
            return "stopped"
        masked_input(store, session, keep[k], export, size, deadline=deadline)
        if stop_after == "masked":
            return "stopped"
        reveal(store, session, keep[k], deadline=deadline)
        if stop_after == "reveal":
            return "stopped"
        return unmask(store, session, deadline=deadline, lease=LEASE)

    return job


def check_sum(store: Store, contributors: list[int], outcome: object) -> None:
    """`outcome` is (weighted, total) equal to the contributors' weighted sum within the bound."""
    assert isinstance(outcome, tuple), outcome
    weighted, total = outcome
    want, want_total = expected_sum(contributors)
    bound = FixedPoint().error(len(contributors))
    assert total == want_total  # integer sizes are exact in fixed point
    assert largest_difference(weighted, want) <= bound + 1e-9
    record = published(store, PREFIX)
    assert record is not None and record["contributors"] == contributors
    assert record["error_bound"] == bound


# --- the sum ----------------------------------------------------------------------------------


def test_the_secure_sum_is_the_weighted_sum_and_its_mean_is_fedavg_within_the_bound(
    tmp_path,
) -> None:
    jobs = {
        k: (
            lambda k=k: secure_sum(
                Store(tmp_path),
                PREFIX,
                export_of(k),
                size_of(k),
                mine=k,
                members=range(N),
                threshold=3,
                deadline=30,
                lease=LEASE,
            )
        )
        for k in range(N)
    }
    out = run_threads(jobs)
    store = Store(tmp_path)
    for k in range(N):
        check_sum(store, list(range(N)), out[k])
    weighted, total = out[0]  # type: ignore[misc]
    mean = average(weighted, total, like=export_of(0))
    fedavg = soma.fedavg([export_of(k) for k in range(N)], [size_of(k) for k in range(N)])
    # the sum is within n 2^-(p+1) of the true one, and the total exact: the mean within that
    # over the total, plus float32's rounding of the two means
    bound = FixedPoint().error(N) / total
    for node in fedavg:
        for key in fedavg[node]:
            assert mean[node][key].dtype == torch.float32
            exact = fedavg[node][key].double()
            assert (mean[node][key].double() - exact).abs().max().item() <= (
                bound + 2 * 2**-24 * exact.abs().max().item() + 1e-12
            )
    assert once.computations(store, once.Place(f"{PREFIX}/unmasked")) == 1, "unmasked once"
    # a client arriving late leaves with the published sum at once
    late = secure_sum(
        store,
        PREFIX,
        export_of(0),
        size_of(0),
        mine=0,
        members=range(N),
        threshold=3,
        deadline=DEADLINE,
        lease=LEASE,
    )
    assert late[1] == total


@pytest.mark.slow
def test_a_client_that_drops_out_after_sharing_is_recovered_with_the_survivors(tmp_path) -> None:
    session = Session(PREFIX, tuple(range(N)), 3)
    keep: dict[int, Secrets] = {}
    stops = {3: "share", 4: "share"}  # two die after sharing: exactly the threshold remains
    out = run_threads(
        {k: phases(tmp_path, session, k, keep, stop_after=stops.get(k)) for k in range(N)}
    )
    store = Store(tmp_path)
    for k in (0, 1, 2):
        check_sum(store, [0, 1, 2], out[k])
    record = published(store, PREFIX)
    assert record is not None
    assert record["dropped"] == [3, 4] and record["revealed_by"] == [0, 1, 2]
    # what the survivors revealed of the dropped clients is their mask keys, never their seeds
    for v in (0, 1, 2):
        revealed = store.recall(f"{PREFIX}/reveal/{v}")
        assert set(revealed["s"]) == {"3", "4"} and set(revealed["b"]) == {"0", "1", "2"}


@pytest.mark.slow
def test_below_the_threshold_nothing_is_revealed_and_the_refusal_names_who_dropped(
    tmp_path,
) -> None:
    session = Session(PREFIX, tuple(range(N)), 4)
    keep: dict[int, Secrets] = {}
    stops = {3: "share", 4: "share"}
    out = run_threads(
        {k: phases(tmp_path, session, k, keep, stop_after=stops.get(k)) for k in range(N)}
    )
    for k in (0, 1, 2):
        error = out[k]
        assert isinstance(error, BelowThreshold), error
        assert "3 of 5 clients sent a masked input, 4 needed (the threshold)" in str(error)
        assert "clients 3, 4 dropped out after sharing" in str(error)
        assert (error.dropped, error.have, error.need) == ([3, 4], 3, 4)
    store = Store(tmp_path)
    assert store.bound(f"{PREFIX}/reveal/") == [], "no share is revealed below the threshold"
    assert store.resolve(f"{PREFIX}/sum") is None


@pytest.mark.slow
def test_too_few_revealed_shares_refuse_the_unmasking_naming_the_dropped_and_the_counts(
    tmp_path,
) -> None:
    """Four contributed, client 4 dropped after sharing, and clients 2 and 3 died before
    revealing: two shares of each secret are there, three needed."""
    session = Session(PREFIX, tuple(range(N)), 3)
    keep: dict[int, Secrets] = {}
    stops = {2: "masked", 3: "masked", 4: "share"}
    out = run_threads(
        {k: phases(tmp_path, session, k, keep, stop_after=stops.get(k)) for k in range(N)}
    )
    for k in (0, 1):
        error = out[k]
        assert isinstance(error, BelowThreshold), error
        said = str(error)
        assert "2 of the 4 clients that contributed revealed their shares" in said
        assert "clients 2, 3 never did" in said
        assert "there are 2 shares of each secret and 3 are needed" in said
        assert "Dropped out after sharing: client 4" in said
        assert (error.dropped, error.missing, error.have, error.need) == ([4], [2, 3], 2, 3)
    assert Store(tmp_path).resolve(f"{PREFIX}/sum") is None


def test_a_client_that_comes_after_the_keys_are_agreed_is_left_out_and_reads_the_sum(
    tmp_path,
) -> None:
    session = Session(PREFIX, tuple(range(N)), 3)
    keep: dict[int, Secrets] = {}
    out = run_threads({k: phases(tmp_path, session, k, keep, deadline=1.0) for k in range(4)})
    store = Store(tmp_path)
    check_sum(store, [0, 1, 2, 3], out[0])
    assert published(store, PREFIX)["never_advertised"] == [4]
    late = advertise(store, session, 4)
    with pytest.raises(LeftOut, match="client 4 came after the keys roster") as caught:
        share(store, session, late, deadline=1.0)
    assert (caught.value.client, caught.value.phase) == (4, "keys")
    assert result(store, PREFIX, deadline=1.0)[1] == out[0][1]  # type: ignore[index]


# --- nothing in the store gives a client away ---------------------------------------------------


def _blobs(store: Store) -> Iterator[tuple[str, bytes]]:
    for folder in sorted((store.directory / "blobs").iterdir()):
        for path in sorted(folder.iterdir()):
            yield path.name, path.read_bytes()


def _reachable(store: Store, digest: str) -> set[str]:
    """A value's record blob and the tensor blobs it names."""
    tree, loose = codecs.parse_record(store.get(digest), digest)
    return {digest, *codecs.references(tree), *([loose] if loose else [])}


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _numbers(value: object) -> Iterator[np.ndarray]:
    """Lists of numbers in a JSON value (an export written as JSON would be one)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        if value and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
            yield np.asarray(value, dtype=np.float64)
        for v in value:
            yield from _numbers(v)


def blob_arrays(
    store: Store, fixed: FixedPoint, skip: set[str]
) -> Iterator[tuple[str, np.ndarray]]:
    """Every array of numbers in every blob but `skip`: tensors (ring elements read back as
    fixed point, floats as they are) and numeric lists in JSON."""
    for digest, data in _blobs(store):
        if digest in skip:
            continue
        try:
            tensors = store.get_tensors(digest)
        except Exception:  # noqa: BLE001 - not a safetensors blob: JSON, or raw bytes
            try:
                yield from ((digest, a) for a in _numbers(json.loads(data)))
            except ValueError:
                pass
            continue
        for tensor in tensors.values():
            array = tensor.numpy().reshape(-1)
            if array.dtype == fixed.dtype:
                yield digest, fixed.decode(array)
            else:
                yield digest, array.astype(np.float64)


def flat_export(export: dict) -> np.ndarray:
    """An export as one float64 vector, nodes and keys sorted (the protocol's order)."""
    return np.concatenate(
        [
            t.double().numpy().reshape(-1)
            for _, keys in sorted(export.items())
            for _, t in sorted(keys.items())
        ]
    )


def assert_no_blob_gives_a_client_away(store: Store, clients: list[int]) -> int:
    """No array in the store (but the published sum) equals any client's export or weighted
    export (within the quantization step), or correlates with it (helpers.correlated); the count of
    same-shaped arrays compared, so that a scan that saw nothing does not pass."""
    fixed = FixedPoint()
    published_sum = store.resolve(f"{PREFIX}/sum")
    skip = set() if published_sum is None else _reachable(store, published_sum)
    targets = []
    for k in clients:
        whole = flat_export(export_of(k))
        targets.append((k, "*", "*", whole, whole * size_of(k)))
        for node, keys in export_of(k).items():
            for key, t in keys.items():
                plain = t.double().numpy().reshape(-1)
                targets.append((k, node, key, plain, plain * size_of(k)))
    compared = 0
    for digest, array in blob_arrays(store, fixed, skip):
        for k, node, key, plain, weighted in targets:
            if array.size != plain.size:
                continue
            compared += 1
            for target in (plain, weighted):
                where = f"blob {digest} and client {k}'s node {node!r} key {key!r}"
                assert not np.allclose(array, target, atol=fixed.error(1), rtol=0), (
                    f"{where}: equal"
                )
                r = correlated(array, target)
                assert r is None, f"{where}: correlated, r = {r:.3f}"
    return compared


@pytest.mark.slow
def test_no_blob_in_the_store_is_or_correlates_with_any_clients_export(tmp_path) -> None:
    session = Session(PREFIX, tuple(range(N)), 3)
    keep: dict[int, Secrets] = {}
    out = run_threads(
        {
            k: phases(tmp_path, session, k, keep, stop_after="share" if k == 4 else None)
            for k in range(N)
        }
    )
    store = Store(tmp_path)
    check_sum(store, [0, 1, 2, 3], out[0])
    compared = assert_no_blob_gives_a_client_away(store, list(range(N)))
    assert compared >= 4 * 4, "the masked inputs' tensors were compared, node by node"


def _haystack(store: Store) -> bytes:
    """Every blob's bytes, and every hex string in a JSON blob decoded: what a reader can see
    without any key."""
    parts = []
    for _, data in _blobs(store):
        parts.append(data)
        try:
            value = json.loads(data)
        except ValueError:
            continue
        for text in _strings(value):
            try:
                parts.append(bytes.fromhex(text))
            except ValueError:
                pass
    return b"\n".join(parts)


def _needles(value: int, width: int) -> list[bytes]:
    return [format(value, "x").encode(), str(value).encode(), value.to_bytes(width, "big")]


@pytest.mark.slow
def test_no_share_or_secret_that_must_stay_secret_is_in_the_store_in_the_clear(tmp_path) -> None:
    """Of a contributor, only its self-mask seed may be rebuilt (its shares of b are revealed);
    of a dropped client, only its mask key. Their other halves' shares, the seeds and the
    private keys must appear nowhere, in any encoding a reader can undo without a key."""
    session = Session(PREFIX, tuple(range(N)), 3)
    keep: dict[int, Secrets] = {}
    out = run_threads(
        {
            k: phases(tmp_path, session, k, keep, stop_after="share" if k == 4 else None)
            for k in range(N)
        }
    )
    store = Store(tmp_path)
    check_sum(store, [0, 1, 2, 3], out[0])
    haystack = _haystack(store)
    contributors, dropped = [0, 1, 2, 3], [4]
    needles: list[tuple[str, bytes]] = []
    for v, secrets in keep.items():
        for u, (b_share, s_share) in received_shares(store, session, secrets).items():
            if u in contributors:
                what = f"client {v}'s share of client {u}'s mask key"
                needles += [(what, n) for n in _needles(s_share, 66)]
            if u in dropped:
                what = f"client {v}'s share of client {u}'s seed"
                needles += [(what, n) for n in _needles(b_share, 66)]
    for k, secrets in keep.items():
        c_key = crypto.private_bytes(secrets._c)
        needles += [(f"client {k}'s share key", n) for n in (c_key, c_key.hex().encode())]
        for v, aes in secrets._share_keys.items():
            needles += [
                (f"the AES key of clients {k} and {v}", n) for n in (aes, aes.hex().encode())
            ]
        if k in contributors:
            s_key = crypto.private_bytes(secrets._s)
            needles += [(f"client {k}'s mask key", n) for n in (s_key, s_key.hex().encode())]
        if k in dropped:
            needles += [(f"client {k}'s seed", n) for n in (secrets._b, secrets._b.hex().encode())]
    assert len(needles) > 50
    for what, needle in needles:
        assert needle not in haystack, f"{what} is in the store in the clear"


@pytest.mark.slow
def test_a_late_masked_input_stays_hidden_by_its_self_mask_though_its_pairwise_masks_are_revealed(
    tmp_path,
) -> None:
    """Client 4 shares, is too slow for the masked roster, then writes its masked input anyway.
    The survivors reveal its mask key (it dropped, as far as the round knows), so anyone can
    rebuild it from the store and strip 4's pairwise masks: what is left must still be hidden by
    4's self-mask, whose seed nobody reveals."""
    session = Session(PREFIX, tuple(range(N)), 3)
    keep: dict[int, Secrets] = {}
    out = run_threads(
        {
            k: phases(tmp_path, session, k, keep, stop_after="share" if k == 4 else None)
            for k in range(N)
        }
    )
    store = Store(tmp_path)
    check_sum(store, [0, 1, 2, 3], out[0])
    masked_input(store, session, keep[4], export_of(4), size_of(4), deadline=1.0)  # too late
    with pytest.raises(LeftOut, match="client 4 came after the masked roster"):
        reveal(store, session, keep[4], deadline=1.0)

    # the attacker: the store and the library, no secrets
    reveals = {v: store.recall(f"{PREFIX}/reveal/{v}") for v in (0, 1, 2, 3)}
    s_4 = shamir.combine([(v + 1, int(r["s"]["4"], 16)) for v, r in reveals.items()], 3)
    private = crypto.private_from_bytes(shamir.to_bytes(s_4))
    assert crypto.private_bytes(private) == crypto.private_bytes(keep[4]._s), (
        "rebuilt from the store"
    )
    record = store.recall(f"{PREFIX}/masked/4")
    layout = layout_of(record, "client 4")
    fixed = session.fixed
    flat = flat_of(layout, record, fixed.dtype, "client 4")
    for v in (0, 1, 2, 3):
        theirs = bytes.fromhex(store.recall(f"{PREFIX}/keys/{v}")["s"])
        seed = masking.pair_seed(private, theirs, session, 4, v)
        masks.add(flat, seed, -masks.pairwise_sign(4, v))
    stripped = fixed.decode(flat)[:-1]
    weighted = flat_export(weighted_of(4))
    assert not np.allclose(stripped, weighted, atol=fixed.error(1), rtol=0), (
        "client 4's export, unmasked"
    )
    assert correlated(stripped, weighted) is None
    assert published(store, PREFIX)["contributors"] == [0, 1, 2, 3], "and it is not in the sum"


# --- real processes -----------------------------------------------------------------------------


def worker(
    store: Path, mine: int, how: str, *, members: int = N, threshold: int = 3, deadline: float
):
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "secagg_worker.py"),
            str(store),
            PREFIX,
            str(mine),
            ",".join(map(str, range(members))),
            str(threshold),
            str(deadline),
            how,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_five_processes_sum_securely(tmp_path) -> None:
    workers = [worker(tmp_path, k, "full", deadline=120) for k in range(N)]
    outputs = communicated(workers, 300, fail_fast=True)
    for w, (_, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, err
    said = [json.loads(out.splitlines()[-1]) for out, _ in outputs]
    assert {s["total"] for s in said} == {float(sum(size_of(k) for k in range(N)))}
    store = Store(tmp_path)
    record = published(store, PREFIX)
    assert record is not None
    check_sum(store, list(range(N)), (record["weighted"], record["total"]))
    assert once.computations(store, once.Place(f"{PREFIX}/unmasked")) == 1
    assert_no_blob_gives_a_client_away(store, list(range(N)))


@pytest.mark.slow
def test_processes_recover_a_client_killed_after_sharing(tmp_path) -> None:
    deadline = 15  # the survivors wait this long for client 2's masked input
    workers = {
        k: worker(tmp_path, k, "die-after-share" if k == 2 else "full", deadline=deadline)
        for k in range(N)
    }
    outputs = dict(zip(workers, communicated(list(workers.values()), 300), strict=True))
    assert workers[2].returncode == 3, outputs[2][1]
    for k in (0, 1, 3, 4):
        assert workers[k].returncode == 0, outputs[k][1]
        assert json.loads(outputs[k][0].splitlines()[-1])["contributors"] == [0, 1, 3, 4]
    store = Store(tmp_path)
    record = published(store, PREFIX)
    assert record is not None and record["dropped"] == [2]
    check_sum(store, [0, 1, 3, 4], (record["weighted"], record["total"]))
