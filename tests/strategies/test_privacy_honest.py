"""Privacy that holds against whoever reads the store (issue 19, items 1, 2 and 7).

- The noise is keyed by 256 bits from the operating system, never by the run's seed: two
  runs of one config draw different noise, the key is nowhere in the store, a key of fewer
  than 32 bytes is refused, and a brute force over a small seed space finds nothing.
- The epsilon reported is the worst-placed client's against a reader of the store, who knows
  the sample: its rounds composed, no amplification; checked against dp_accounting, with
  the secret-sample figures (Poisson, fixed size) beside it; the budget stops on it.
- Nothing per client in clear: DP publishes the start's counts, never a client's; under
  secure aggregation the train receipts hold no metrics and the alone receipts no size.
"""

from __future__ import annotations

import base64
import json
import math
import os
from pathlib import Path

import pytest
import torch

import soma
from soma import privacy
from soma.config.participation import sampled
from soma.strategies import StrategyError, Update, load_strategy
from soma.timing import LEASE

torch.set_num_threads(1)

DELTA = 1e-5


def dp(**options) -> object:
    return load_strategy("dp_fedavg", options)


def big(value: float = 0.0) -> dict:
    return {"big": {"w": torch.full((256,), value)}}


# --- the noise -------------------------------------------------------------------------------


def test_two_runs_of_the_same_config_draw_different_noise() -> None:
    start, options = big(), {"clip": 0.5, "noise_multiplier": 1.0}
    one = [Update(0, 1.0, big(1.0))]
    a = dp(**options).aggregate(start, one, None, clients=1)[0]["big"]["w"]
    b = dp(**options).aggregate(start, one, None, clients=1)[0]["big"]["w"]
    assert not torch.equal(a, b)
    options.update(mode="distributed", clients_per_round=1)
    shares = [
        dp(**options).local(start=start, state=None, mine=None).release(start, start, seed=7)
        for _ in range(2)
    ]
    assert not torch.equal(shares[0]["big"]["w"], shares[1]["big"]["w"])


def test_a_seed_for_the_noise_is_refused_unless_the_noise_says_it_is_not_private() -> None:
    with pytest.raises(StrategyError, match="option seed=3 seeds the noise only under noise: "):
        dp(seed=3)
    with pytest.raises(StrategyError, match="option noise must be one of private, reprod"):
        dp(noise="seeded")


def test_the_noise_key_is_256_bits_and_a_32_bit_seed_is_refused() -> None:
    for short in (b"\x00" * 4, b"\x00" * 8, b"\x00" * 31, b"\x00" * 33, 2**31, "a seed"):
        with pytest.raises(privacy.PrivacyError, match="the noise key is 32 bytes"):
            privacy.NoiseSource(short)
    # torch keeps 32 bits of a seed (the audit's way in); two keys that differ only above
    # bit 32 draw unrelated noise here
    low = torch.randn(8, generator=torch.Generator().manual_seed(5))
    assert torch.equal(low, torch.randn(8, generator=torch.Generator().manual_seed(5 + 2**32)))
    key = bytes(32)
    other = (1 << 40).to_bytes(32, "big")
    assert not torch.equal(
        privacy.NoiseSource(key).normal((8,)), privacy.NoiseSource(other).normal((8,))
    )
    assert "withheld" in repr(privacy.private_noise())


def test_a_brute_force_over_a_small_seed_space_does_not_find_the_noise() -> None:
    """The audit's attack, shrunk: the published weights minus the noiseless clipped mean
    are the noise; try every seed of a 10-bit space, as the audit tried torch's 32 bits."""
    start, update = big(), [Update(0, 1.0, big(0.01))]  # within the clip: the mean is 0.01
    published = dp(clip=1.0, noise_multiplier=1.0).aggregate(start, update, None, clients=1)[0]
    noise = published["big"]["w"].double() - 0.01
    std = privacy.noise_std(1.0, 1.0, 1)
    for seed in range(2**10):
        tried = privacy.reproducible_noise_not_private(seed, "central", 1).normal((256,)) * std
        assert not torch.allclose(tried, noise, atol=1e-5), f"seed {seed} strips the noise"


def test_the_noise_key_never_touches_the_store(tmp_path, monkeypatch) -> None:
    from soma.round import Meeting, average_round, contribute

    keys: list[bytes] = []
    real = os.urandom

    def recording(n: int) -> bytes:
        drawn = real(n)
        if n == privacy.KEY_BYTES:
            keys.append(drawn)
        return drawn

    monkeypatch.setattr(privacy.os, "urandom", recording)
    store = soma.Store(tmp_path)
    start = store.put_value(big())
    options = {"noise_multiplier": 1.0, "clip": 0.5}
    state = None
    for r in range(2):
        meeting = Meeting(
            "dp", r, 2, start=start, state=state, strategy="dp_fedavg", options=options
        )
        for k in range(2):
            contribute(store, meeting, big(k + 1.0), mine=k, size=1)
        record = store.recall_digest(average_round(store, meeting, deadline=5, lease=LEASE))
        start, state = record["weights"], record["state"]
    assert len(keys) >= 2, "each round drew a key"
    forms = [form for key in keys for form in (key, key.hex().encode(), base64.b64encode(key))]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        assert not any(form in data for form in forms), f"{path} holds a noise key"


def test_reproducible_noise_repeats_and_is_reported_as_an_infinite_epsilon() -> None:
    options = {"noise": "reproducible_not_private", "seed": 1, "noise_multiplier": 1.0}
    start, one = big(), [Update(0, 1.0, big(1.0))]
    a, state = dp(**options).aggregate(start, one, None, clients=1)
    b, _ = dp(**options).aggregate(start, one, None, clients=1)
    assert torch.equal(a["big"]["w"], b["big"]["w"])
    assert state["epsilon"] == math.inf
    with pytest.raises(StrategyError, match="budget=100: one more round would spend epsilon inf"):
        dp(**options, budget=100.0).check_state(None, clients=1)


# --- the accountant --------------------------------------------------------------------------


def test_the_public_figure_is_dp_accountings_composition_of_gaussians() -> None:
    import dp_accounting as dpa
    from dp_accounting import pld, rdp

    for z, k in [(1.0, 10), (0.8, 22), (2.0, 3)]:
        event = dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), k)
        ledger = rdp.RdpAccountant()
        ledger.compose(event)
        ours = privacy.epsilon_public(privacy.exposure(z, k), DELTA)
        assert ours == pytest.approx(ledger.get_epsilon(DELTA), rel=1e-9)
    tight = pld.PLDAccountant()  # slow: one case
    tight.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(2.0), 3))
    ours = privacy.epsilon_public(privacy.exposure(2.0, 3), DELTA, accountant="pld")
    assert ours == pytest.approx(tight.get_epsilon(DELTA), rel=1e-3)
    mixed = dpa.ComposedDpEvent(
        [dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), 5) for z in (1.0, 2.0)]
    )
    ledger = rdp.RdpAccountant()
    ledger.compose(mixed)
    total = privacy.exposure(1.0, 5) + privacy.exposure(2.0, 5)
    assert privacy.epsilon_public(total, DELTA) == pytest.approx(ledger.get_epsilon(DELTA))
    assert privacy.epsilon_public(0.0, DELTA) == 0.0
    assert privacy.epsilon_public(privacy.exposure(0.0), DELTA) == math.inf


def test_the_secret_sample_figures_are_dp_accountings_with_their_adjacency() -> None:
    import dp_accounting as dpa
    from dp_accounting import rdp

    poisson = dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(1.0))
    ledger = rdp.RdpAccountant()
    ledger.compose(dpa.SelfComposedDpEvent(poisson, 50))
    assert privacy.epsilon(1.0, 0.1, 50, DELTA) == ledger.get_epsilon(DELTA)
    assert privacy.epsilon(1.0, 0.1, 50, DELTA) == pytest.approx(5.89, abs=0.01)  # the audit's
    # a fixed count without replacement is replace-one: the sum moves by 2C, so z / 2
    fixed = dpa.SampledWithoutReplacementDpEvent(100, 10, dpa.GaussianDpEvent(0.5))
    ledger = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    ledger.compose(dpa.SelfComposedDpEvent(fixed, 50))
    assert privacy.epsilon_fixed_sample(1.0, 100, 10, 50, DELTA) == ledger.get_epsilon(DELTA)


def worst_placed(clients: int, count: int, rounds: int, seed: int = 0) -> int:
    """The most rounds any one client takes part in, the sample drawn as the run draws it."""
    taken = [0] * clients
    for r in range(rounds):
        for k in sampled(seed, r, clients, count):
            taken[k] += 1
    return max(taken)


def test_the_reported_epsilon_is_the_worst_placed_clients_against_a_store_reader() -> None:
    """z 1.0, 10 of 100 clients, 50 rounds, seed 0: reported 5.89 (a secret Poisson sample)
    before; the worst-placed client, in 10 rounds, is at 19.05 against whoever reads the
    store, which names who took part."""
    strategy = dp(noise_multiplier=1.0, clients_per_round=10)
    start, state = {"fc": {"w": torch.zeros(2)}}, None
    for r in range(50):
        came = [Update(k, 1.0, start) for k in sampled(0, r, 100, 10)]
        _, state = strategy.aggregate(start, came, state, clients=100)
    assert worst_placed(100, 10, 50) == 10
    assert state["epsilon"] == pytest.approx(19.0536, abs=1e-3)
    # central mode: against a reader of the published weights (the store has every update)
    assert privacy.spent(state)["against"] == privacy.WEIGHTS_READER
    # z 0.8, 50 of 1000, 200 rounds: the worst-placed client takes part in 22 rounds
    assert worst_placed(1000, 50, 200) == 22
    assert privacy.epsilon_public(privacy.exposure(0.8, 22), DELTA) == pytest.approx(
        43.78, abs=0.01
    )


def test_the_budget_stops_on_the_public_figure() -> None:
    """Client 0 in every round of 10 of 100: the secret-sample figure would allow 50 rounds
    within epsilon 12; the public one stops when client 0's own rounds reach it."""
    allowed = max(k for k in range(1, 50) if privacy.epsilon_public(k, DELTA) <= 12.0)
    assert privacy.epsilon(1.0, 0.1, 50, DELTA) < 12.0 and allowed < 50
    strategy = dp(noise_multiplier=1.0, clients_per_round=10, budget=12.0)
    start, state = {"fc": {"w": torch.zeros(2)}}, None
    came = [Update(k, 1.0, start) for k in range(10)]
    for _ in range(allowed):
        _, state = strategy.aggregate(start, came, state, clients=100)
    with pytest.raises(StrategyError, match=r"budget=12: one more round would spend epsilon"):
        strategy.check_state(state, clients=100)


def test_a_round_stepped_from_the_mean_is_charged_to_every_client() -> None:
    strategy = dp(mode="distributed", clients_per_round=2, noise_multiplier=2.0)
    start = big()
    _, state = strategy.from_mean(start, big(0.5), None, clients=4)
    assert state["published"] == {"everyone": 0.25, "clients": {}}
    assert state["exposure"]["everyone"] == pytest.approx(0.5)  # each release: z / sqrt(2)
    newer = ("exposure", "against", "epsilons", "published")
    older = {k: v for k, v in state.items() if k not in newer}  # a state kept before
    _, again = strategy.from_mean(start, big(0.5), older, clients=4)
    assert again["published"]["everyone"] == pytest.approx(0.5)  # charged as everyone's


# --- nothing per client in clear -------------------------------------------------------------


def test_dp_publishes_the_starts_counts_never_a_clients() -> None:
    start = {"bn": {"w": torch.zeros(3), "num_batches_tracked": torch.tensor(5)}}
    theirs = [
        Update(k, 1.0, {"bn": {"w": torch.ones(3), "num_batches_tracked": torch.tensor(5 + n)}})
        for k, n in enumerate((17, 400))
    ]
    weights, _ = dp(noise_multiplier=1.0).aggregate(start, theirs, None, clients=2)
    assert torch.equal(weights["bn"]["num_batches_tracked"], torch.tensor(5))


def test_secure_workflow_jobs_write_nothing_per_client_in_clear(tmp_path) -> None:
    """The workflow's jobs of one secure round of three clients, in process: no train
    receipt holds the client's metrics (its loss, its steps), no alone receipt its size."""
    from soma import workflow
    from soma.workflow import secure as jobs

    options = {"partition": "labels_per_client", "labels_per_client": 5, "model": "softmax"}
    config = {
        "run": "sec",
        "task": "soma.tasks.digits",
        "task_options": {"soma.tasks.digits": {**options, "epochs": 1}},
        "clients": 3,
        "rounds": 1,
        "seed": 0,
        "store": str(tmp_path / "store"),
        "secure_aggregation": {"threshold": 2, "secrets": str(tmp_path / "secrets/{client}")},
        "metric": "accuracy",
    }
    start = str(tmp_path / "start.json")
    workflow.start(config, start)

    def at(name: str, k: int) -> str:
        return str(tmp_path / f"{name}{k}.json")

    for k in range(3):
        jobs.keys(config, 0, k, start, at("keys", k))
    for k in range(3):
        jobs.share(config, 0, k, start, at("shared", k))
    for k in range(3):
        jobs.train(config, 0, k, start, at("train", k))
        receipt = json.loads(Path(at("train", k)).read_text())
        assert receipt["secure"] is True and "metrics" not in receipt, receipt
    workflow.alone(config, 1, start, at("alone", 1))
    alone = json.loads(Path(at("alone", 1)).read_text())
    assert "size" not in alone and alone["per_round"][0]["metrics"]


def test_a_secure_run_keeps_no_client_s_metrics_or_evaluation_in_the_store(tmp_path) -> None:
    """Federated evaluation and training metrics are per client: under secure aggregation
    none is kept (a reader of the store would see each client's metrics and sizes)."""
    from soma.store import Store

    done = soma.simulate(
        "soma.tasks.control", clients=3, rounds=2, secure_aggregation=2, store=tmp_path / "s"
    )
    assert len(done.rounds) == 2
    names = Store(tmp_path / "s").bound("")
    per_client = [n for n in names if "/evaluated/" in n or "/trained/" in n]
    assert names and per_client == []
    plain = soma.simulate("soma.tasks.control", clients=3, rounds=1, store=tmp_path / "p")
    assert plain.rounds[0].federated is not None  # the control task evaluates in a plain run
