"""What a training run exports, what it refuses, and putting several together (CU15)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import soma
from soma.tasks import teacher as control

torch.set_num_threads(1)


class ParametersOnly:
    """A node that knows its parameters but not their names."""

    def __init__(self) -> None:
        self.weight = nn.Parameter(torch.randn(3, 2))
        self.bias = nn.Parameter(torch.zeros(3))

    def parameters(self):
        return iter([self.weight, self.bias])


class NoWeights:
    """A node with neither duck: it is a node, it just has nothing to export."""


def network(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    return {
        "conv": nn.Linear(4, 8),
        "norm": nn.BatchNorm1d(8),
        "act": nn.ReLU(),
        "plain": ParametersOnly(),
        "marker": NoWeights(),
    }


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


# --- What it exports ---------------------------------------------------------------------


def test_the_weights_node_by_node_and_a_node_with_none_is_not_in_there() -> None:
    exported = soma.export(network())
    assert set(exported) == {"conv", "norm", "plain"}
    assert "act" not in exported and "marker" not in exported


def test_a_node_that_names_its_weights_is_asked_by_name_and_one_that_does_not_in_order() -> None:
    nodes = network()
    exported = soma.export(nodes)
    assert set(exported["conv"]) == {"weight", "bias"}
    assert set(exported["norm"]) == {
        "weight",
        "bias",
        "running_mean",
        "running_var",
        "num_batches_tracked",
    }
    assert list(exported["plain"]) == ["0", "1"]
    assert torch.equal(exported["plain"]["0"], nodes["plain"].weight)
    assert exported["norm"]["num_batches_tracked"].dtype == torch.int64


def test_what_comes_out_is_a_snapshot_and_not_a_view() -> None:
    nodes = network()
    exported = soma.export(nodes)
    before = exported["conv"]["weight"].clone()
    with torch.no_grad():
        nodes["conv"].weight.add_(1.0)
        nodes["plain"].weight.add_(1.0)
    assert torch.equal(exported["conv"]["weight"], before)
    assert not torch.equal(exported["plain"]["0"], nodes["plain"].weight)
    assert not exported["conv"]["weight"].requires_grad
    exported["conv"]["bias"].add_(5.0)
    assert not torch.equal(nodes["conv"].bias, exported["conv"]["bias"])


def test_it_goes_back_in_where_it_came_from() -> None:
    source, target = network(seed=1), network(seed=2)
    source["norm"](torch.randn(16, 8))  # moves running stats and the count
    state = soma.export(source)
    assert not same(soma.export(target), state)
    soma.load(target, state)
    assert same(soma.export(target), state)
    assert int(target["norm"].num_batches_tracked) == 1


def test_the_optimizers_state_is_not_in_it() -> None:
    run = control.student(seed=0)
    teacher = control.teacher()
    run.fit(control.corner(0, 64, seed=1, teacher_net=teacher))
    assert run.optimizer.state  # momentum exists ...
    exported = run.export()
    names = {key for keys in exported.values() for key in keys}
    assert names == {"weight", "bias"}  # ... and is not exported
    assert sum(t.numel() for k in exported.values() for t in k.values()) == sum(
        p.numel() for node in run.nodes.values() for p in node.parameters()
    )


# --- What it refuses ---------------------------------------------------------------------


def bits(nodes: dict) -> dict:
    return soma.export(nodes)


def test_loading_something_this_run_does_not_have_by_name() -> None:
    nodes = network()
    state = soma.export(nodes)
    state["ghost"] = {"weight": torch.zeros(1)}
    with pytest.raises(soma.LoadError, match="'ghost'"):
        soma.load(nodes, state)
    state = soma.export(nodes)
    state["conv"]["extra"] = torch.zeros(1)
    with pytest.raises(soma.LoadError, match="'conv'.*'extra'"):
        soma.load(nodes, state)


def test_loading_a_weight_of_the_wrong_shape_names_both_shapes() -> None:
    nodes = network()
    state = soma.export(nodes)
    state["conv"]["weight"] = torch.zeros(8, 5)
    with pytest.raises(soma.LoadError, match=r"'conv'.*'weight'.*\(8, 5\).*\(8, 4\)"):
        soma.load(nodes, state)


def test_loading_a_weight_of_another_dtype_names_both() -> None:
    nodes = network()
    state = soma.export(nodes)
    state["conv"]["bias"] = state["conv"]["bias"].double()
    with pytest.raises(soma.LoadError, match="'bias'.*float64.*float32"):
        soma.load(nodes, state)


def test_a_state_that_leaves_something_out_is_refused_unless_partial() -> None:
    nodes = network()
    state = soma.export(network(seed=5))
    del state["norm"]
    with pytest.raises(soma.LoadError, match="'norm'.*left out"):
        soma.load(nodes, state)
    del state["conv"]["bias"]
    with pytest.raises(soma.LoadError, match="'conv'.*'bias'.*left out"):
        soma.load({"conv": nodes["conv"]}, {"conv": state["conv"]})
    local_norm = soma.export({"norm": nodes["norm"]})
    soma.load(nodes, state, partial=True)  # FedBN: normalisation stays local
    assert same(soma.export({"norm": nodes["norm"]}), local_norm)
    assert torch.equal(nodes["conv"].weight, state["conv"]["weight"])


@pytest.mark.parametrize(
    "spoil",
    [
        lambda s: s.__setitem__("ghost", {"w": torch.zeros(1)}),
        lambda s: s["norm"].__setitem__("running_var", torch.zeros(9)),
        lambda s: s["plain"].__setitem__("1", torch.zeros(3, dtype=torch.float64)),
        lambda s: s["norm"].pop("num_batches_tracked"),
    ],
    ids=["unknown node", "wrong shape", "wrong dtype", "missing key"],
)
def test_a_refusal_leaves_the_net_as_it_was_rather_than_half_loaded(spoil) -> None:
    nodes = network(seed=1)
    before = soma.export(nodes)
    state = soma.export(network(seed=2))  # differs in every float
    spoil(state)
    with pytest.raises(soma.LoadError):
        soma.load(nodes, state)
    after = soma.export(nodes)
    assert same(after, before)  # bit-identical, every node


def test_exporting_or_loading_what_is_trained_where_it_runs_is_refused() -> None:
    nodes = network()
    state = soma.export(nodes)
    nodes["conv"] = soma.elsewhere(nodes["conv"], on="gpu-node-07")
    with pytest.raises(soma.ElsewhereError, match="'conv'.*gpu-node-07"):
        soma.export(nodes)
    before = soma.export({k: v for k, v in nodes.items() if k != "conv"})
    with pytest.raises(soma.ElsewhereError, match="'conv'"):
        soma.load(nodes, state)
    assert same(soma.export({k: v for k, v in nodes.items() if k != "conv"}), before)


def test_but_one_trained_here_is_exported_like_any_other() -> None:
    run = control.student(seed=3)  # trains itself, with its own optimizer, here
    run.fit(control.corner(0, 64, seed=1, teacher_net=control.teacher()))
    exported = soma.export(run.nodes)
    assert set(exported) == {"hidden", "out"}
    assert torch.equal(exported["hidden"]["weight"], run.nodes["hidden"].weight)


def test_node_ids_are_text() -> None:
    with pytest.raises(soma.ExportError, match="3"):
        soma.export({3: nn.Linear(1, 1)})


# --- Putting several together ------------------------------------------------------------


def two_exports() -> tuple[dict, dict]:
    a, b = network(seed=1), network(seed=2)
    a["norm"](torch.randn(4, 8))
    for _ in range(3):
        b["norm"](torch.randn(4, 8))
    return soma.export(a), soma.export(b)


def test_the_average_of_one_is_that_one() -> None:
    a, _ = two_exports()
    assert same(soma.fedavg([a]), a)
    assert same(soma.fedavg([a], sizes=[7]), a)
    assert same(soma.fedavg(iter([a])), a)


@pytest.mark.slow
def test_the_average_of_two_is_halfway_between() -> None:
    a, b = two_exports()
    mean = soma.fedavg([a, b])
    for node in ("conv", "plain"):
        for key in a[node]:
            torch.testing.assert_close(mean[node][key], (a[node][key] + b[node][key]) / 2)
    torch.testing.assert_close(
        mean["norm"]["running_mean"], (a["norm"]["running_mean"] + b["norm"]["running_mean"]) / 2
    )
    assert same(soma.fedavg([a, b], sizes=[3, 3]), mean)


def test_sizes_is_what_it_weighs_by_and_ten_times_the_data_pulls_ten_times() -> None:
    a, b = two_exports()
    mean = soma.fedavg([a, b], sizes=[10, 1])
    for key in a["conv"]:
        expected = (10 * a["conv"][key] + b["conv"][key]) / 11
        torch.testing.assert_close(mean["conv"][key], expected)
        # ten times closer to a than to b
        to_a = (mean["conv"][key] - a["conv"][key]).abs().sum()
        to_b = (mean["conv"][key] - b["conv"][key]).abs().sum()
        torch.testing.assert_close(to_b / to_a, torch.tensor(10.0), rtol=1e-3, atol=0)
    only_b = soma.fedavg([a, b], sizes=[0, 5])
    assert torch.equal(only_b["conv"]["weight"], b["conv"]["weight"])
    assert int(only_b["norm"]["num_batches_tracked"]) == 1  # a count: the first one's stands


def test_what_is_not_a_number_you_can_halve_is_not_halved() -> None:
    a, b = two_exports()
    assert int(a["norm"]["num_batches_tracked"]) == 1
    assert int(b["norm"]["num_batches_tracked"]) == 3
    for mean in (
        soma.fedavg([a, b]),
        soma.fedavg([a, b], sizes=[1, 100]),
        soma.fedavg(iter([a, b])),
    ):
        count = mean["norm"]["num_batches_tracked"]
        assert count.dtype == torch.int64 and int(count) == 1  # the first one's stands
    flags = [
        {"mask": {"on": torch.tensor([True, False])}},
        {"mask": {"on": torch.tensor([False, False])}},
    ]
    assert torch.equal(soma.fedavg(flags)["mask"]["on"], torch.tensor([True, False]))


def test_half_precision_accumulates_in_float32_and_comes_back_in_its_own_dtype() -> None:
    x = torch.full((4,), 2048.0, dtype=torch.float16)
    y = torch.full((4,), 2049.0 + 1.0, dtype=torch.float16)  # 2050 is representable
    z = torch.full((4,), 2048.0, dtype=torch.float16)
    exports = [{"n": {"w": t}} for t in (x, y, z, z)]
    mean = soma.fedavg(exports)["n"]["w"]
    assert mean.dtype == torch.float16
    assert torch.equal(mean, torch.full((4,), 2048.5, dtype=torch.float32).half())
    for dtype in (torch.bfloat16, torch.float64):
        m = soma.fedavg([{"n": {"w": t.to(dtype)}} for t in (x, y)])["n"]["w"]
        assert m.dtype == dtype


def test_inputs_are_never_mutated() -> None:
    a, b = two_exports()
    a0, b0 = (
        {n: {k: t.clone() for k, t in v.items()} for n, v in a.items()},
        {n: {k: t.clone() for k, t in v.items()} for n, v in b.items()},
    )
    soma.fedavg([a, b], sizes=[2, 5])
    soma.fedavg(iter([(a, 1), (b, 2)]))
    assert same(a, a0) and same(b, b0)


@pytest.mark.parametrize("as_iterator", [False, True], ids=["list", "iterator"])
@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda a, b: ([], None), "nothing"),
        (lambda a, b: ([a, b], [1]), "sizes"),
        (lambda a, b: ([a, b], [1, 2, 3]), "sizes"),
        (lambda a, b: ([a, b], [1, -2]), "export 1.*-2"),
        (lambda a, b: ([a, b], [0, 0]), "zero"),
        (lambda a, b: ([a, {**b, "extra": {"w": torch.zeros(1)}}], None), "'extra'.*export 1"),
        (lambda a, b: ([a, {k: v for k, v in b.items() if k != "plain"}], None), "'plain'"),
        (
            lambda a, b: ([a, {**b, "conv": {"weight": b["conv"]["weight"]}}], None),
            "'conv'.*'bias'",
        ),
        (
            lambda a, b: ([a, {**b, "conv": {**b["conv"], "weight": torch.zeros(8, 3)}}], None),
            r"'conv'.*'weight'.*\(8, 4\).*\(8, 3\)",
        ),
        (
            lambda a, b: (
                [a, {**b, "conv": {**b["conv"], "bias": b["conv"]["bias"].double()}}],
                None,
            ),
            "'bias'.*float32.*float64",
        ),
    ],
    ids=[
        "nothing",
        "too few sizes",
        "too many sizes",
        "negative",
        "zero total",
        "another node",
        "missing node",
        "missing key",
        "shape",
        "dtype",
    ],
)
def test_refused_before_anything_is_computed(build, match, as_iterator, monkeypatch) -> None:
    a, b = two_exports()
    exports, sizes = build(a, b)
    folded = []
    import soma.aggregate as aggregate

    for fold in ("_fold", "lerp_each"):  # an iterator's one at a time; a list's all at once
        real = getattr(aggregate, fold)
        monkeypatch.setattr(aggregate, fold, lambda *a, real=real: folded.append(1) or real(*a))
    with pytest.raises(soma.AggregationError, match=match):
        soma.fedavg(iter(exports) if as_iterator else exports, sizes)
    if not as_iterator:
        assert folded == []  # nothing was computed


def test_an_iterator_of_pairs_weighs_like_a_list_with_sizes() -> None:
    a, b = two_exports()
    assert same(soma.fedavg(iter([(a, 3), (b, 1)])), soma.fedavg([a, b], sizes=[3, 1]))
    assert same(soma.fedavg((e for e in [a, b]), sizes=[3, 1]), soma.fedavg([a, b], sizes=[3, 1]))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64]
)
def test_a_list_gives_the_bits_an_iterator_of_it_gives(dtype: torch.dtype) -> None:
    """A list is folded all at once, chunk by chunk (soma.arithmetic.lerp_each), an iterator
    one export at a time: the same operations in the same order, so the same bits, across
    the chunks' edges (a tensor of 2.5 chunks), with sizes of zero, a view that is not
    contiguous, and counts."""
    g = torch.Generator().manual_seed(7)
    exports = [
        {
            "n": {
                "w": torch.randn(5 * 2**14 + 3, generator=g).to(dtype),
                "t": torch.randn(9, 7, generator=g).to(dtype).t(),  # not contiguous
                "count": torch.tensor(k),
            }
        }
        for k in range(6)
    ]
    sizes = [0, 3, 0, 1, 5, 2]
    listed = soma.fedavg(exports, sizes)
    assert same(listed, soma.fedavg(iter(exports), sizes))
    assert same(listed, soma.fedavg(iter(list(zip(exports, sizes, strict=True)))))
    assert listed["n"]["count"].item() == 0 and listed["n"]["w"].dtype == dtype


def test_the_mean_is_its_single_rounded_steps_written_out_so_the_same_bits_anywhere() -> None:
    """Each step of the running mean is one correctly rounded operation, the float32 steps
    mean + w (x - mean), or x - (1 - w)(x - mean) from w 0.5 up, written out here in numpy:
    what makes the mean the same bits on every machine, where torch's fused lerp rounds once
    on one CPU and twice on another (tests/test_capabilities.py compares the capabilities'
    bits in processes of their own). A list and an iterator alike."""
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal(70_000).astype(np.float32) for _ in range(4)]
    sizes = [1, 3, 1, 5]  # folded with weights 3/4, 1/5, 1/2: both sides of a half
    expected, total = xs[0].copy(), sizes[0]
    for x, size in zip(xs[1:], sizes[1:], strict=True):
        total += size
        w, d = size / total, x - expected
        expected = x - d * np.float32(1 - w) if w >= 0.5 else expected + d * np.float32(w)
    exports = [{"n": {"w": torch.from_numpy(x)}} for x in xs]
    for given in (exports, iter(exports)):
        assert np.array_equal(soma.fedavg(given, sizes)["n"]["w"].numpy(), expected)


def test_an_iterator_holds_one_export_at_a_time() -> None:
    """The generator is consumed lazily: each export may be dropped once it is folded in."""
    import gc
    import weakref

    alive: list[weakref.ref] = []

    def exports():
        for seed in range(5):
            tensor = torch.randn(1000, generator=torch.Generator().manual_seed(seed))
            alive.append(weakref.ref(tensor))
            yield {"n": {"w": tensor}}
            gc.collect()
            assert sum(r() is not None for r in alive) <= 1

    soma.fedavg(exports())


# --- The control: three corners, one teacher, and a client that stayed home -------------


def test_three_clients_that_each_see_a_corner_read_the_union_better_than_one_alone() -> None:
    teacher = control.teacher()
    clients = [control.student(seed=0) for _ in range(3)]
    loner = control.student(seed=0)
    data = [control.corner(k, 256, seed=100 + k, teacher_net=teacher) for k in range(3)]
    union = control.union(range(3), 1000, seed=9000, teacher_net=teacher)
    for _ in range(30):
        for client, shard in zip(clients, data, strict=True):
            client.fit(shard)
        loner.fit(data[0])  # exactly as long, on its own corner
        average = soma.fedavg([c.export() for c in clients], sizes=[256, 256, 256])
        for client in clients:
            client.load(average)
    federated = float(clients[0].evaluate(union))
    alone = float(loner.evaluate(union))
    assert federated * 5 < alone, (federated, alone)  # measured: 0.038 against 0.47


def test_a_round_leaves_every_client_at_the_same_weights() -> None:
    teacher = control.teacher()
    clients = [control.student(seed=k, batchnorm=True) for k in range(3)]
    for k, client in enumerate(clients):
        client.fit(control.corner(k, 64, seed=k, teacher_net=teacher))
    exports = [c.export() for c in clients]
    assert not same(exports[0], exports[1])
    average = soma.fedavg(exports, sizes=[64, 32, 16])
    for client in clients:
        client.load(average)
    for client in clients:
        assert same(client.export(), clients[0].export())


@pytest.mark.parametrize("as_iterator", [False, True])
def test_sizes_whose_sum_overflows_are_refused_not_weighed_as_zero(as_iterator) -> None:
    a = {"n": {"w": torch.zeros(2)}}
    b = {"n": {"w": torch.ones(2)}}
    pairs = [(a, 1e308), (b, 1e308)]
    with pytest.raises(soma.AggregationError, match="add up to inf"):
        soma.fedavg(iter(pairs) if as_iterator else [a, b], None if as_iterator else [1e308, 1e308])
