"""The server-side optimizers (FedAvgM, FedAdam, FedYogi, FedAdagrad), checked against
arithmetic done by hand in plain Python floats, not against the code under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import soma
from soma.strategies import (
    StrategyError,
    Update,
    at_round,
    fedadagrad,
    fedadam,
    fedavgm,
    fedyogi,
    load_strategy,
)

NAMES = ["fedavgm", "fedadam", "fedyogi", "fedadagrad"]


def weights(values: list[float]) -> dict:
    return {"fc": {"weight": torch.tensor(values, dtype=torch.float64)}}


def values(export: dict, moment: str | None = None) -> list[float]:
    tensor = export[moment]["fc"]["weight"] if moment else export["fc"]["weight"]
    return tensor.tolist()


def two_rounds(strategy) -> tuple[dict, dict, dict, dict]:
    """Two rounds of one 2-element weight, two clients of sizes 1 and 3.

    Round 1 starts from [1, -2]; the clients send [3, 0] and [1, -4], whose mean is
    [(3 + 3) / 4, (0 - 12) / 4] = [1.5, -3]. Round 2 starts from round 1's result; the
    clients send [5, 0] and [1, -3], whose mean is [(5 + 3) / 4, (0 - 9) / 4] = [2, -2.25].
    The updates come as a generator: the strategies stream.
    """
    previous = weights([1.0, -2.0])
    first = (Update(0, 1, weights([3.0, 0.0])), Update(1, 3, weights([1.0, -4.0])))
    x1, s1 = strategy.aggregate(previous, iter(first), None, clients=2)
    second = (Update(0, 1, weights([5.0, 0.0])), Update(1, 3, weights([1.0, -3.0])))
    x2, s2 = strategy.aggregate(x1, iter(second), s1, clients=2)
    return x1, s1, x2, s2


def close(got: list[float], wanted: list[float], rtol: float = 1e-12) -> bool:
    return torch.allclose(
        torch.tensor(got, dtype=torch.float64),
        torch.tensor(wanted, dtype=torch.float64),
        rtol=rtol,
        atol=1e-15,
    )


# --- the arithmetic, by hand -----------------------------------------------------------------


def test_fedavgm_by_hand() -> None:
    x1, s1, x2, s2 = two_rounds(fedavgm.make(server_lr=0.5, momentum=0.9))
    # round 1: delta = [1.5 - 1, -3 + 2] = [0.5, -1]; m = 0.9 * 0 + delta; x = [1, -2] + 0.5 m
    assert close(values(s1, "m"), [0.5, -1.0])
    assert close(values(x1), [1.25, -2.5])
    # round 2: delta = [2 - 1.25, -2.25 + 2.5] = [0.75, 0.25]
    # m = [0.45 + 0.75, -0.9 + 0.25] = [1.2, -0.65]; x = [1.25 + 0.6, -2.5 - 0.325]
    assert close(values(s2, "m"), [1.2, -0.65])
    assert close(values(x2), [1.85, -2.825])
    assert sorted(s2) == ["m"]


def test_fedadam_by_hand() -> None:
    lr, beta1, beta2, tau = 0.5, 0.9, 0.99, 0.1
    x1, s1, x2, s2 = two_rounds(fedadam.make(server_lr=lr, beta1=beta1, beta2=beta2, tau=tau))
    # round 1: delta = [0.5, -1], m = 0.1 delta, v = 0.99 * tau^2 + 0.01 delta^2
    m1 = [0.05, -0.1]
    v1 = [0.0099 + 0.0025, 0.0099 + 0.01]
    wanted_x1 = [
        1.0 + lr * 0.05 / (math.sqrt(v1[0]) + tau),
        -2.0 + lr * -0.1 / (math.sqrt(v1[1]) + tau),
    ]
    assert close(values(s1, "m"), m1)
    assert close(values(s1, "v"), v1)
    assert close(values(x1), wanted_x1)
    # round 2: delta = [2, -2.25] - x1
    d2 = [2.0 - wanted_x1[0], -2.25 - wanted_x1[1]]
    m2 = [beta1 * m + (1 - beta1) * d for m, d in zip(m1, d2, strict=True)]
    v2 = [beta2 * v + (1 - beta2) * d * d for v, d in zip(v1, d2, strict=True)]
    wanted_x2 = [
        x + lr * m / (math.sqrt(v) + tau) for x, m, v in zip(wanted_x1, m2, v2, strict=True)
    ]
    assert close(values(s2, "m"), m2)
    assert close(values(s2, "v"), v2)
    assert close(values(x2), wanted_x2)


def test_fedyogi_by_hand() -> None:
    lr, beta1, beta2, tau = 0.5, 0.9, 0.99, 0.1
    x1, s1, x2, s2 = two_rounds(fedyogi.make(server_lr=lr, beta1=beta1, beta2=beta2, tau=tau))
    # round 1: v starts at tau^2 = 0.01, below both delta^2 (0.25, 1): sign is -1, and v
    # grows by 0.01 delta^2 (Adam's would be 0.0124 and 0.0199)
    m1 = [0.05, -0.1]
    v1 = [0.01 + 0.0025, 0.01 + 0.01]
    wanted_x1 = [
        1.0 + lr * 0.05 / (math.sqrt(v1[0]) + tau),
        -2.0 + lr * -0.1 / (math.sqrt(v1[1]) + tau),
    ]
    assert close(values(s1, "m"), m1)
    assert close(values(s1, "v"), v1)
    assert close(values(x1), wanted_x1)
    d2 = [2.0 - wanted_x1[0], -2.25 - wanted_x1[1]]
    signs = [math.copysign(1.0, v - d * d) for v, d in zip(v1, d2, strict=True)]
    assert signs == [-1.0, 1.0]  # both of Yogi's branches: v grows, and v shrinks
    m2 = [beta1 * m + (1 - beta1) * d for m, d in zip(m1, d2, strict=True)]
    v2 = [v - (1 - beta2) * d * d * s for v, d, s in zip(v1, d2, signs, strict=True)]
    wanted_x2 = [
        x + lr * m / (math.sqrt(v) + tau) for x, m, v in zip(wanted_x1, m2, v2, strict=True)
    ]
    assert close(values(s2, "m"), m2)
    assert close(values(s2, "v"), v2)
    assert close(values(x2), wanted_x2)


def test_fedadagrad_by_hand() -> None:
    lr, beta1, tau = 0.5, 0.9, 0.1
    x1, s1, x2, s2 = two_rounds(fedadagrad.make(server_lr=lr, beta1=beta1, tau=tau))
    # round 1: v = tau^2 + delta^2
    m1 = [0.05, -0.1]
    v1 = [0.01 + 0.25, 0.01 + 1.0]
    wanted_x1 = [
        1.0 + lr * 0.05 / (math.sqrt(0.26) + tau),
        -2.0 + lr * -0.1 / (math.sqrt(1.01) + tau),
    ]
    assert close(values(s1, "m"), m1)
    assert close(values(s1, "v"), v1)
    assert close(values(x1), wanted_x1)
    d2 = [2.0 - wanted_x1[0], -2.25 - wanted_x1[1]]
    m2 = [beta1 * m + (1 - beta1) * d for m, d in zip(m1, d2, strict=True)]
    v2 = [v + d * d for v, d in zip(v1, d2, strict=True)]
    wanted_x2 = [
        x + lr * m / (math.sqrt(v) + tau) for x, m, v in zip(wanted_x1, m2, v2, strict=True)
    ]
    assert close(values(s2, "m"), m2)
    assert close(values(s2, "v"), v2)
    assert close(values(x2), wanted_x2)


def test_fedadagrad_with_beta1_zero_has_no_first_moment() -> None:
    # Not Flower's FedAdagrad by itself: Flower's v also starts at 0 (see the v0 tests below)
    _, s1, x2, s2 = two_rounds(fedadagrad.make(server_lr=0.5, beta1=0.0, tau=0.1))
    assert close(values(s1, "m"), [0.5, -1.0])  # m is delta itself
    x1 = [1.0 + 0.5 * 0.5 / (math.sqrt(0.26) + 0.1), -2.0 + 0.5 * -1.0 / (math.sqrt(1.01) + 0.1)]
    d2 = [2.0 - x1[0], -2.25 - x1[1]]
    assert close(values(s2, "m"), d2)


def test_the_defaults_are_the_documented_ones() -> None:
    assert (fedavgm.make().server_lr, fedavgm.make().momentum) == (1.0, 0.9)
    adam = fedadam.make()
    assert (adam.server_lr, adam.beta1, adam.beta2, adam.tau) == (0.1, 0.9, 0.99, 1e-3)
    yogi = fedyogi.make()
    assert (yogi.server_lr, yogi.beta1, yogi.beta2, yogi.tau) == (0.01, 0.9, 0.99, 1e-3)
    adagrad = fedadagrad.make()
    assert (adagrad.server_lr, adagrad.beta1, adagrad.tau) == (0.1, 0.9, 1e-3)


# --- FedAvg, counts, dtypes ------------------------------------------------------------------


def random_network(generator: torch.Generator) -> dict:
    return {
        "conv": {
            "weight": torch.randn(3, 4, generator=generator),
            "bias": (torch.randn(3, generator=generator) * 1e4).to(torch.float16),
        },
        "bn": {
            "running_mean": torch.randn(3, generator=generator, dtype=torch.float64),
            "num_batches_tracked": torch.randint(0, 100, (), generator=generator),
        },
        "head": {"weight": torch.randn(2, 3, generator=generator).to(torch.bfloat16)},
    }


def test_fedavgm_without_momentum_at_server_lr_1_is_fedavg_bit_for_bit() -> None:
    generator = torch.Generator().manual_seed(7)
    strategy = fedavgm.make(momentum=0, server_lr=1)
    previous, state = random_network(generator), None
    for _ in range(3):
        exports = [random_network(generator) for _ in range(5)]
        sizes = [float(s) for s in torch.randint(1, 1000, (5,), generator=generator)]
        updates = [
            Update(i, size, e) for i, (e, size) in enumerate(zip(exports, sizes, strict=True))
        ]
        got, state = strategy.aggregate(previous, iter(updates), state, clients=5)
        wanted = soma.fedavg(exports, sizes)
        for node, keys in wanted.items():
            for key, tensor in keys.items():
                assert got[node][key].dtype == tensor.dtype
                assert torch.equal(got[node][key], tensor), (node, key)
        previous = got


def test_fedavgms_momentum_step_is_a_multiply_then_an_add_so_the_same_bits_anywhere() -> None:
    """Round 2's step x = lerp(x1, mean, lr) + (lr momentum) m1, from round 1's x1 and m1,
    written out in float32 numpy, each step one correctly rounded operation: torch's
    `add(..., alpha=)` fuses the multiply into the add on some CPUs and not on others, and an
    average must recompute to the same bits anywhere (tests/test_capabilities.py compares
    the capabilities in processes of their own). One client a round: its mean is its export."""
    rng = np.random.default_rng(5)
    start, one, two = (rng.standard_normal(70_000).astype(np.float32) for _ in range(3))

    def net(x: np.ndarray) -> dict:
        return {"fc": {"weight": torch.from_numpy(x)}}

    strategy = fedavgm.make(server_lr=0.3, momentum=0.9)
    x1, s1 = strategy.aggregate(net(start), iter([Update(0, 1, net(one))]), None, clients=1)
    x2, _ = strategy.aggregate(x1, iter([Update(0, 1, net(two))]), s1, clients=1)
    x1, m1 = x1["fc"]["weight"].numpy(), s1["m"]["fc"]["weight"].numpy()
    stepped = x1 + (two - x1) * np.float32(0.3)  # lerp below a half: start + w (end - start)
    assert np.array_equal(x2["fc"]["weight"].numpy(), stepped + m1 * np.float32(0.3 * 0.9))


def counted(weight: list[float], count: int) -> dict:
    return {
        "fc": {"weight": torch.tensor(weight, dtype=torch.float64)},
        "bn": {"num_batches_tracked": torch.tensor(count), "running_var": torch.ones(2)},
    }


@pytest.mark.parametrize("name", NAMES)
def test_integer_counts_take_the_means_value_and_are_never_stepped(name: str) -> None:
    strategy = load_strategy(name, {"server_lr": 0.5})
    previous, state = counted([1.0, -2.0], 5), None
    for round_, (first, second) in enumerate([(7, 9), (11, 3)]):
        updates = [Update(0, 1, counted([3.0, 0.0], first)), Update(1, 3, counted([1, -4], second))]
        previous, state = strategy.aggregate(previous, iter(updates), state, clients=2)
        count = previous["bn"]["num_batches_tracked"]
        assert count.dtype == torch.int64, round_
        assert count.item() == first, round_
        for moment in state.values():
            assert "num_batches_tracked" not in moment.get("bn", {})
            assert set(moment["bn"]) == {"running_var"}


def half_network(values: list[float]) -> dict:
    return {
        "a": {
            "half": torch.tensor(values, dtype=torch.float16),
            "brain": torch.tensor(values, dtype=torch.bfloat16),
            "single": torch.tensor(values, dtype=torch.float32),
            "count": torch.tensor(3, dtype=torch.int32),
        }
    }


def as_float32(export: dict) -> dict:
    return {
        node: {k: t.float() if t.dtype.is_floating_point else t for k, t in keys.items()}
        for node, keys in export.items()
    }


@pytest.mark.parametrize("name", NAMES)
def test_half_precision_is_stepped_in_float32_and_comes_back_in_its_own_dtype(name: str) -> None:
    strategy = load_strategy(name, {"server_lr": 0.5})
    previous = half_network([1.0, -2.0])
    exports = [half_network([3.0, 0.0]), half_network([1.0, -4.0])]  # means exact in fp16
    got, state = strategy.aggregate(
        previous, iter([Update(0, 1, exports[0]), Update(1, 3, exports[1])]), None, clients=2
    )
    single, single_state = strategy.aggregate(
        as_float32(previous),
        iter([Update(0, 1, as_float32(exports[0])), Update(1, 3, as_float32(exports[1]))]),
        None,
        clients=2,
    )
    for key, tensor in previous["a"].items():
        assert got["a"][key].dtype == tensor.dtype, key
        assert torch.equal(got["a"][key], single["a"][key].to(tensor.dtype)), key
    for moment, nodes in state.items():
        for key in ("half", "brain", "single"):
            assert nodes["a"][key].dtype == torch.float32, (moment, key)
            assert torch.equal(nodes["a"][key], single_state[moment]["a"][key]), (moment, key)


@pytest.mark.parametrize("name", ["fedadam", "fedyogi", "fedadagrad"])
def test_complex_weights_are_refused_by_the_adaptive_ones(name: str) -> None:
    previous = {"fc": {"z": torch.zeros(2, dtype=torch.complex64)}}
    update = Update(0, 1, {"fc": {"z": torch.ones(2, dtype=torch.complex64)}})
    with pytest.raises(StrategyError, match="node 'fc' key 'z'"):
        load_strategy(name).aggregate(previous, [update], None, clients=1)


# --- the state ---------------------------------------------------------------------------


def noisy_round(generator: torch.Generator, previous: dict) -> list[Update]:
    return [
        Update(
            i,
            float(i + 1),
            {
                n: {
                    k: t + torch.randn(t.shape, generator=generator).to(t.dtype)
                    if t.dtype.is_floating_point
                    else t + i
                    for k, t in keys.items()
                }
                for n, keys in previous.items()
            },
        )
        for i in range(3)
    ]


def assert_equal_exports(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for node in a:
        assert a[node].keys() == b[node].keys(), node
        for key in a[node]:
            assert a[node][key].dtype == b[node][key].dtype, (node, key)
            assert torch.equal(a[node][key], b[node][key]), (node, key)


@pytest.mark.parametrize("name", NAMES)
def test_a_state_kept_in_the_store_continues_bit_for_bit(name: str, tmp_path) -> None:
    strategy = load_strategy(name, {"server_lr": 0.3})
    store = soma.Store(tmp_path)
    start = random_network(torch.Generator().manual_seed(1))
    generator = torch.Generator().manual_seed(2)
    rounds = []
    previous = start
    for _ in range(3):
        rounds.append(noisy_round(generator, previous))
        previous = rounds[-1][0].weights

    in_memory, state = start, None
    for updates in rounds:
        in_memory, state = strategy.aggregate(in_memory, iter(updates), state, clients=3)

    kept, kept_state = start, None
    for updates in rounds:
        kept, kept_state = strategy.aggregate(kept, iter(updates), kept_state, clients=3)
        kept_state = store.recall_digest(store.put_value(kept_state))

    assert_equal_exports(kept, in_memory)
    assert sorted(kept_state) == sorted(state)
    for moment in state:
        assert_equal_exports(kept_state[moment], state[moment])


def state_after_one_round(name: str, previous: dict) -> dict:
    update = Update(0, 1, {n: {k: t + 1 for k, t in keys.items()} for n, keys in previous.items()})
    return load_strategy(name).aggregate(previous, [update], None, clients=1)[1]


def one_round_with(name: str, previous: dict, state: dict) -> None:
    update = Update(0, 1, previous)
    load_strategy(name).aggregate(previous, [update], state, clients=1)


@pytest.mark.parametrize("name", NAMES)
def test_a_state_from_a_network_of_another_shape_is_refused_naming_node_and_key(name) -> None:
    stale = state_after_one_round(name, {"fc": {"weight": torch.zeros(2)}})
    with pytest.raises(StrategyError, match=rf"{name} state m node 'fc' key 'weight'.*\(3,\)"):
        one_round_with(name, {"fc": {"weight": torch.zeros(3)}}, stale)


@pytest.mark.parametrize("name", NAMES)
def test_a_state_missing_a_key_or_with_one_too_many_is_refused_naming_it(name: str) -> None:
    small = {"fc": {"weight": torch.zeros(2)}}
    big = {"fc": {"weight": torch.zeros(2), "bias": torch.zeros(1)}}
    with pytest.raises(StrategyError, match=r"no node 'fc' key 'bias'"):
        one_round_with(name, big, state_after_one_round(name, small))
    with pytest.raises(StrategyError, match=r"has node 'fc' key 'bias'"):
        one_round_with(name, small, state_after_one_round(name, big))


@pytest.mark.parametrize("name", NAMES)
def test_a_state_in_another_dtype_is_refused(name: str) -> None:
    stale = state_after_one_round(name, {"fc": {"weight": torch.zeros(2, dtype=torch.float64)}})
    with pytest.raises(StrategyError, match=r"node 'fc' key 'weight'.*float64"):
        one_round_with(name, {"fc": {"weight": torch.zeros(2)}}, stale)


def test_another_strategys_state_is_refused() -> None:
    previous = {"fc": {"weight": torch.zeros(2)}}
    with pytest.raises(StrategyError, match=r"fedavgm state holds \['m', 'v'\], not \['m'\]"):
        one_round_with("fedavgm", previous, state_after_one_round("fedadam", previous))
    with pytest.raises(StrategyError, match=r"fedyogi state holds \['m'\]"):
        one_round_with("fedyogi", previous, state_after_one_round("fedavgm", previous))
    with pytest.raises(StrategyError, match="fedadam state is a list"):
        one_round_with("fedadam", previous, [])


@pytest.mark.parametrize("name", NAMES)
def test_updates_of_another_network_than_the_start_are_refused(name: str) -> None:
    previous = {"fc": {"weight": torch.zeros(2)}}
    other = Update(0, 1, {"fc": {"weight": torch.zeros(3)}})
    with pytest.raises(StrategyError, match=r"node 'fc' key 'weight': shape \(2,\) in the weights"):
        load_strategy(name).aggregate(previous, [other], None, clients=1)
    extra = Update(0, 1, {"fc": {"weight": torch.zeros(2), "bias": torch.zeros(1)}})
    with pytest.raises(StrategyError, match="node 'fc' key 'bias' is in the updates"):
        load_strategy(name).aggregate(previous, [extra], None, clients=1)


@pytest.mark.parametrize("name", NAMES)
def test_without_a_start_to_step_from_the_round_is_refused(name: str) -> None:
    strategy = load_strategy(name)
    assert strategy.needs_previous  # what the round asks before anything is claimed
    with pytest.raises(StrategyError, match=f"{name} steps from the weights the round started"):
        strategy.aggregate(None, [Update(0, 1, weights([1.0, 1.0]))], None, clients=1)


def test_the_state_given_is_not_written_into() -> None:
    strategy = fedadam.make()
    _, s1, _, _ = two_rounds(strategy)
    before = {k: v["fc"]["weight"].clone() for k, v in s1.items()}
    strategy.aggregate(weights([0.0, 0.0]), [Update(0, 1, weights([1.0, 1.0]))], s1, clients=1)
    for moment, tensor in before.items():
        assert torch.equal(s1[moment]["fc"]["weight"], tensor)


# --- options and names -----------------------------------------------------------------------


def test_the_option_refusal_reads_as_documented() -> None:
    with pytest.raises(StrategyError) as error:
        fedadam.make(beta1=1.5)
    assert str(error.value) == "fedadam option beta1 must be a number in [0, 1), not 1.5"


@pytest.mark.parametrize(
    "name, option, value",
    [
        ("fedavgm", "server_lr", -1.0),
        ("fedavgm", "server_lr", True),
        ("fedavgm", "server_lr", float("inf")),
        ("fedavgm", "momentum", 1.0),
        ("fedavgm", "momentum", -0.5),
        ("fedadam", "server_lr", 0),
        ("fedadam", "server_lr", float("nan")),
        ("fedadam", "beta1", 1.5),
        ("fedadam", "beta2", 1),
        ("fedadam", "tau", 0.0),
        ("fedadam", "tau", "1e-3"),
        ("fedyogi", "beta1", "0.9"),
        ("fedyogi", "beta2", -0.01),
        ("fedyogi", "tau", -1e-3),
        ("fedyogi", "server_lr", None),
        ("fedadagrad", "beta1", 1.0),
        ("fedadagrad", "tau", False),
        ("fedadagrad", "server_lr", -0.1),
    ],
)
def test_a_bad_option_is_refused_naming_the_option_and_the_value(name, option, value) -> None:
    with pytest.raises(StrategyError) as error:
        load_strategy(name, {option: value})
    assert f"{name} option {option} must be a number" in str(error.value)
    assert str(error.value).endswith(f"not {value!r}")


@pytest.mark.parametrize("name, option", [("fedadam", "beta3"), ("fedadagrad", "beta2")])
def test_an_unknown_option_is_refused_naming_it(name: str, option: str) -> None:
    module = {"fedadam": fedadam, "fedadagrad": fedadagrad}[name]
    with pytest.raises(TypeError, match=option):
        module.make(**{option: 0.5})
    with pytest.raises(StrategyError, match=option):
        load_strategy(name, {option: 0.5})


@pytest.mark.parametrize("name", NAMES)
def test_the_strategies_are_found_by_name(name: str) -> None:
    module = {"fedavgm": fedavgm, "fedadam": fedadam, "fedyogi": fedyogi}.get(name, fedadagrad)
    found = load_strategy(name, {"server_lr": 0.5, "momentum" if name == "fedavgm" else "tau": 0.1})
    made = module.make(**{"server_lr": 0.5, "momentum" if name == "fedavgm" else "tau": 0.1})
    assert found == made
    x_found, s_found, _, _ = two_rounds(found)
    x_made, s_made, _, _ = two_rounds(made)
    assert_equal_exports(x_found, x_made)


# --- Flower's variants: v0 zero, FedAdam's bias correction (by hand, from Flower's formulas) ----


def two_bound_rounds(strategy, first_round: int = 0) -> tuple[dict, dict, dict, dict]:
    """`two_rounds`, each round's strategy bound to its round (0-based) as the round binds it."""
    previous = weights([1.0, -2.0])
    first = (Update(0, 1, weights([3.0, 0.0])), Update(1, 3, weights([1.0, -4.0])))
    one = at_round(strategy, round=first_round, seed=5)
    x1, s1 = one.aggregate(previous, iter(first), None, clients=2)
    second = (Update(0, 1, weights([5.0, 0.0])), Update(1, 3, weights([1.0, -3.0])))
    two = at_round(strategy, round=first_round + 1, seed=5)
    x2, s2 = two.aggregate(x1, iter(second), s1, clients=2)
    return x1, s1, x2, s2


def test_flowers_fedadam_by_hand_v_from_zero_and_its_bias_corrected_rate() -> None:
    lr, b1, b2, tau = 0.5, 0.9, 0.99, 0.1
    strategy = fedadam.make(
        server_lr=lr, beta1=b1, beta2=b2, tau=tau, v0="zero", bias_correction=True
    )
    x1, s1, x2, s2 = two_bound_rounds(strategy)
    # Flower's round 1 (server_round 1): eta_norm = lr sqrt(1 - b2^2) / (1 - b1^2)
    eta1 = lr * math.sqrt(1 - b2**2) / (1 - b1**2)
    m1, v1 = [0.05, -0.1], [0.01 * 0.25, 0.01 * 1.0]  # v from 0: (1 - b2) delta^2
    wanted_x1 = [1.0 + eta1 * 0.05 / (0.05 + tau), -2.0 + eta1 * -0.1 / (0.1 + tau)]
    assert close(values(s1, "v"), v1)
    assert close(values(x1), wanted_x1)
    # round 2 (server_round 2): eta_norm = lr sqrt(1 - b2^3) / (1 - b1^3)
    eta2 = lr * math.sqrt(1 - b2**3) / (1 - b1**3)
    d2 = [2.0 - wanted_x1[0], -2.25 - wanted_x1[1]]
    m2 = [b1 * m + (1 - b1) * d for m, d in zip(m1, d2, strict=True)]
    v2 = [b2 * v + (1 - b2) * d * d for v, d in zip(v1, d2, strict=True)]
    wanted_x2 = [
        x + eta2 * m / (math.sqrt(v) + tau) for x, m, v in zip(wanted_x1, m2, v2, strict=True)
    ]
    assert close(values(s2, "m"), m2)
    assert close(values(x2), wanted_x2)


def test_bias_correction_follows_the_round_not_the_count_of_steps() -> None:
    lr, b1, b2, tau = 0.5, 0.9, 0.99, 0.1
    strategy = fedadam.make(server_lr=lr, beta1=b1, beta2=b2, tau=tau, bias_correction=True)
    x1, *_ = two_bound_rounds(strategy, first_round=9)  # soma's round 9 is Flower's 10
    eta = lr * math.sqrt(1 - b2**11) / (1 - b1**11)
    v1 = [0.0099 + 0.0025, 0.0099 + 0.01]  # v0 tau2, the default
    wanted = [
        1.0 + eta * 0.05 / (math.sqrt(v1[0]) + tau),
        -2.0 + eta * -0.1 / (math.sqrt(v1[1]) + tau),
    ]
    assert close(values(x1), wanted)


def test_bias_correction_refuses_a_strategy_never_told_its_round() -> None:
    previous = weights([1.0, -2.0])
    with pytest.raises(StrategyError, match="bias_correction.*at_round"):
        fedadam.make(bias_correction=True).aggregate(
            previous, iter([Update(0, 1, weights([3.0, 0.0]))]), None, clients=1
        )


def test_flowers_fedyogi_by_hand_v_from_zero() -> None:
    lr, b1, b2, tau = 0.5, 0.9, 0.99, 0.1
    x1, s1, *_ = two_rounds(fedyogi.make(server_lr=lr, beta1=b1, beta2=b2, tau=tau, v0="zero"))
    # v = 0 - (1 - b2) delta^2 sign(0 - delta^2) = 0.01 delta^2
    v1 = [0.0025, 0.01]
    assert close(values(s1, "v"), v1)
    assert close(values(x1), [1.0 + lr * 0.05 / (0.05 + tau), -2.0 + lr * -0.1 / (0.1 + tau)])


def test_flowers_fedadagrad_by_hand_no_first_moment_and_v_from_zero() -> None:
    lr, tau = 0.5, 0.1
    x1, s1, x2, s2 = two_rounds(fedadagrad.make(server_lr=lr, beta1=0.0, tau=tau, v0="zero"))
    # v = delta^2; x = previous + lr delta / (|delta| + tau)
    assert close(values(s1, "v"), [0.25, 1.0])
    wanted_x1 = [1.0 + lr * 0.5 / (0.5 + tau), -2.0 + lr * -1.0 / (1.0 + tau)]
    assert close(values(x1), wanted_x1)
    d2 = [2.0 - wanted_x1[0], -2.25 - wanted_x1[1]]
    v2 = [0.25 + d2[0] ** 2, 1.0 + d2[1] ** 2]
    assert close(values(s2, "v"), v2)
    wanted_x2 = [
        x + lr * d / (math.sqrt(v) + tau) for x, d, v in zip(wanted_x1, d2, v2, strict=True)
    ]
    assert close(values(x2), wanted_x2)


@pytest.mark.parametrize(
    "name, options, named",
    [
        ("fedadam", {"v0": "tau"}, "v0"),
        ("fedyogi", {"v0": 0}, "v0"),
        ("fedadagrad", {"v0": None}, "v0"),
        ("fedadam", {"bias_correction": 1}, "bias_correction"),
        ("fedyogi", {"bias_correction": True}, "bias_correction"),
        ("scaffold", {"server_mean": "median"}, "server_mean"),
        ("fedavg", {"norm_bound": 0}, "norm_bound"),
        ("fedadam", {"norm_bound": float("inf")}, "norm_bound"),
    ],
)
def test_the_new_options_are_refused_by_name(name, options, named) -> None:
    with pytest.raises(StrategyError, match=named):
        load_strategy(name, options)


def test_the_defaults_stay_the_papers_start_without_correction() -> None:
    for name in ("fedadam", "fedyogi", "fedadagrad"):
        strategy = load_strategy(name)
        assert strategy.v0 == "tau2" and not strategy.bias_correction, name
        assert at_round(strategy, round=3, seed=1) is strategy  # nothing bound: same bits


# --- SCAFFOLD's server mean --------------------------------------------------------------------


def test_scaffold_server_mean_weighted_by_default_uniform_as_the_paper() -> None:
    previous = weights([1.0, -2.0])
    zero = weights([0.0, 0.0])

    def step(**options):
        rows = [Update(0, 1, weights([3.0, 0.0]), zero), Update(1, 3, weights([1.0, -4.0]), zero)]
        x, _ = load_strategy("scaffold", options).aggregate(previous, iter(rows), None, clients=2)
        return values(x)

    assert close(step(), [1.5, -3.0])  # (3 + 3) / 4, (0 - 12) / 4
    assert close(step(server_mean="weighted"), [1.5, -3.0])
    assert close(step(server_mean="uniform"), [2.0, -2.0])  # (3 + 1) / 2, (0 - 4) / 2
    assert close(step(server_mean="uniform", server_lr=0.5), [1.5, -2.0])  # halfway from [1, -2]
