"""Client-level differential privacy (DP-FedAvg, McMahan et al. 2018): the arithmetic and the
accountant. Pure: tensors and numbers in, tensors and numbers out; nothing read or written.

An *update* is export-shaped, `{node: {key: tensor}}`: a client's weights minus the round's
start. Its coordinates are its real floating-point tensors, all nodes together; integer and
bool tensors are counts (BatchNorm's `num_batches_tracked`), never clipped, never noised,
never in the norm: they pass through `clip` as they are (dp_fedavg keeps the round start's
value of them, never a client's, which no noise would cover). A complex tensor is refused (its noise
would need a convention of its own, and nothing in soma trains one).

- `clip`: the whole update scaled so that its L2 norm (over every float of every node, one
  vector) is at most the bound, so that one client moves the sum by at most the bound,
  whatever it trained on. Clipping node by node would let it move it by bound x sqrt(nodes).
- `noise_std`: the Gaussian noise on the mean of `m` clipped updates, z C / m: the sum's
  sensitivity is C, its noise z C, and the mean divides both by the fixed m.
- `share_std`: distributed DP, each of the m clients' share, z C / sqrt(m): m independent
  shares add up to the central z C.
- `NoiseSource` and `gaussian`: the noise, from AES-256 in counter mode under a 32-byte key
  (`private_noise`: `os.urandom`), never from the run's seed: the seed is in the config and
  in the store, and a torch generator keeps 32 bits of it, few enough to try them all and
  take the noise off the published weights (it was done, in 35 minutes on two cores).
  `reproducible_noise_not_private` keys it by the SHA-256 of a seed instead, for benchmarks,
  and is not private. Continuous Gaussian noise, drawn in float64 and rounded once to the
  weight's dtype, in both modes; in distributed mode it is added before the secure sum's
  fixed point (rounding after the noise is post-processing). Discrete noise in the secure
  sum's ring (TensorFlow Federated's distributed discrete Gaussian or Skellam) was not
  chosen: the sum of m continuous Gaussian shares is exactly the central Gaussian, so the
  accounting below is exact, where a sum of discrete Gaussians is only close to one and
  needs an accountant of its own; the floating-point caveat (Mironov 2012: the low bits of a
  float sample are not exactly Gaussian) is bounded by the float32 rounding of the result.
- Adaptive clipping (Andrew et al. 2021): `update_multiplier` and `next_clip`.
- The accountant, against whom each figure holds:
  - `exposure` and `epsilon_public`: against a reader who knows the sample (soma draws it
    by hash from the run's seed and writes it in every round record): a client's rounds are
    Gaussian mechanisms composed, no amplification by sampling, add-or-remove-one adjacency.
    Gaussians compose exactly into one Gaussian, so a client's history is one number, the
    sum of z^-2 over the rounds it took part in. Against whoever reads only the published
    weights, z is the sum's; against whoever reads the store, it is what the store holds of
    the client: in distributed DP without secure aggregation its own release, z / sqrt(m)
    (`distributed_multiplier`). dp_fedavg keeps both figures (the worst-placed client's).
  - `epsilon` and `epsilon_of` (a history of stretches): a Poisson sample at rate q that is
    secret from the reader (`PoissonSampledDpEvent`, add-or-remove-one). soma draws no such
    sample, so nothing here reports it; it is the figure the literature quotes.
  - `epsilon_fixed_sample`: a fixed count drawn without replacement, secret from the
    reader (`SampledWithoutReplacementDpEvent`, replace-one, multiplier z / 2).
  - `noise_for_epsilon`: the inverse of `epsilon`, by bisection (at rate 1 it is the public
    figure of a client that takes part in every round).
  RDP by default (the moments accountant of McMahan et al., closed-form and fast, an upper
  bound about 10% above the tighter PLD's, `accountant="pld"`).
- `spent`: what a state says was spent, for `soma status` and the summary.

`dp_accounting` is an optional dependency (`pip install 'soma[privacy]'`), imported only when
an epsilon is asked for.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from soma.errors import SomaError
from soma.lazy import OnUse

if TYPE_CHECKING:
    import torch

    from soma import arithmetic
else:  # torch only where a tensor is clipped or noised: `spent` (soma status) reads JSON
    torch = OnUse("torch", globals())
    arithmetic = OnUse("soma.arithmetic", globals())

Tensors = Mapping[str, Mapping[str, "torch.Tensor"]]
TensorMap = dict[str, dict[str, "torch.Tensor"]]
# One stretch of a run's history: (noise multiplier, sampling rate, rounds).
Stretch = tuple[float, float, int]

ACCOUNTANTS = ("rdp", "pld")
INSTALL = "pip install 'soma[privacy]' (or pip install dp-accounting cryptography)"


class PrivacyError(SomaError):
    """A privacy computation asked with arguments it cannot take, or without its accountant."""


# --- clipping --------------------------------------------------------------------------------


def is_coordinate(tensor: torch.Tensor) -> bool:
    """Whether a tensor is part of the update that DP clips and noises (a real float), or a
    count that passes through (integer, bool). A complex tensor is refused by name."""
    return tensor.dtype.is_floating_point


def _coordinates(update: Tensors) -> list[tuple[str, str, torch.Tensor]]:
    found = []
    for node, keys in update.items():
        for key, tensor in keys.items():
            if tensor.dtype.is_complex:
                raise PrivacyError(
                    f"node {node!r} key {key!r} is {tensor.dtype}: differential privacy here "
                    "clips and noises real floats only"
                )
            if is_coordinate(tensor):
                found.append((node, key, tensor))
    return found


def l2_norm(update: Tensors) -> float:
    """The L2 norm of every float of every node together, accumulated in float64 in a fixed
    order (the same float on every machine: soma.arithmetic.sum_of_squares)."""
    return math.sqrt(arithmetic.sum_of_squares(t for _, _, t in _coordinates(update)))


def clip(update: Tensors, bound: float) -> tuple[TensorMap, float]:
    """(the update scaled to L2 norm at most `bound`, its norm before). An update within the
    bound comes back unscaled (as new tensors); counts come back as they are."""
    bound = _positive("bound", bound)
    norm = l2_norm(update)
    factor = min(1.0, bound / norm) if norm > 0 else 1.0
    clipped: TensorMap = {}
    for node, keys in update.items():
        clipped[node] = {
            key: (tensor * factor if is_coordinate(tensor) else tensor)
            for key, tensor in keys.items()
        }
    return clipped, norm


# --- noise -----------------------------------------------------------------------------------


def noise_std(bound: float, multiplier: float, clients_sampled: int) -> float:
    """The standard deviation of the noise on the mean of `clients_sampled` clipped updates:
    z C / m. The mean's sensitivity is C / m (the fixed denominator), so z is the noise in
    units of the sensitivity, which is what the accountant takes."""
    bound = _positive("bound", bound)
    multiplier = _non_negative("noise multiplier", multiplier)
    clients_sampled = _count("clients sampled", clients_sampled)
    return multiplier * bound / clients_sampled


def share_std(bound: float, multiplier: float, clients_sampled: int) -> float:
    """One client's share of the noise in distributed DP: z C / sqrt(m). The m clients' shares
    are independent, so their sum has the variance m (z C)^2 / m = (z C)^2 of central DP's
    noise on the sum, and the averager's mean the central z C / m."""
    bound = _positive("bound", bound)
    multiplier = _non_negative("noise multiplier", multiplier)
    clients_sampled = _count("clients sampled", clients_sampled)
    return multiplier * bound / math.sqrt(clients_sampled)


def distributed_multiplier(multiplier: float, clients_sampled: int, *, secure: bool) -> float:
    """The noise multiplier of one client's round in distributed DP as whoever reads the store
    sees it. Without secure aggregation its own release is there, clipped to C with noise of
    `share_std` z C / sqrt(m): a Gaussian mechanism of multiplier z / sqrt(m). With it, only
    the sum of the m releases is there, with all their noise: multiplier z."""
    multiplier = _non_negative("noise multiplier", multiplier)
    clients_sampled = _count("clients sampled", clients_sampled)
    return multiplier if secure else multiplier / math.sqrt(clients_sampled)


KEY_BYTES = 32  # AES-256: the noise's key is 256 bits, never a 32- or 64-bit seed


class NoiseSource:
    """Standard normals from AES-256 in counter mode under a 32-byte key (through
    `cryptography`): a cryptographically secure stream, so that the noise cannot be drawn
    again, and so taken off the published weights, by anyone who does not hold the key. A
    torch generator keeps 32 bits of its seed at most (`manual_seed(s)` is
    `manual_seed(s + 2**32)`): its noise was recovered from published weights by trying
    every seed. The key is refused unless it is 32 bytes; it lives in this object only.

    Uniforms are 53-bit (the top bits of each 64-bit word of the keystream, plus a half so
    that none is 0), turned into pairs of normals by Box-Muller in float64."""

    __slots__ = ("_stream",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
            length = len(key) if isinstance(key, (bytes, bytearray)) else type(key).__name__
            raise PrivacyError(
                f"the noise key is {KEY_BYTES} bytes (AES-256), not {length}: a shorter seed "
                "is a search space whoever reads the weights can try in full"
            )
        try:
            from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        except ImportError as error:
            raise PrivacyError(f"the noise needs cryptography: {INSTALL}") from error

        cipher = Cipher(algorithms.AES(bytes(key)), modes.CTR(bytes(16)))  # one key, one stream
        self._stream = cipher.encryptor()

    def __repr__(self) -> str:
        return "NoiseSource(<key withheld>)"

    def uniform(self, count: int) -> torch.Tensor:
        """`count` uniforms in (0, 1), float64, from the next 8 x `count` keystream bytes."""
        words = np.frombuffer(self._stream.update(bytes(8 * count)), dtype=np.uint64)
        return (torch.from_numpy((words >> np.uint64(11)).astype(np.float64)) + 0.5) * 2.0**-53

    def normal(self, shape: Sequence[int], dtype: torch.dtype | None = None) -> torch.Tensor:
        """Standard normals of `shape`, drawn in float64 and rounded once to `dtype` (None:
        float64)."""
        count = math.prod(shape)
        pairs = (count + 1) // 2
        u = self.uniform(2 * pairs)
        radius = torch.sqrt(-2.0 * torch.log(u[:pairs]))
        angle = 2.0 * math.pi * u[pairs:]
        draws = torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)])[:count]
        return draws.reshape(tuple(shape)).to(torch.float64 if dtype is None else dtype)


def private_noise() -> NoiseSource:
    """Noise keyed by 32 bytes from the operating system (`os.urandom`): nothing about the
    run (its seed, its config, the store) determines it, and the key is never written."""
    return NoiseSource(os.urandom(KEY_BYTES))


def reproducible_noise_not_private(seed: int, *parts: object) -> NoiseSource:
    """Noise keyed by SHA-256 of (seed, parts): a rerun draws the same bits, and so can
    whoever knows the seed, and take the noise off. For benchmarks only: a strategy using it
    reports an infinite epsilon."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise PrivacyError(f"seed must be an integer, not {seed!r}")
    text = "/".join(["soma/privacy/reproducible-not-private", str(int(seed)), *map(str, parts)])
    return NoiseSource(hashlib.sha256(text.encode()).digest())


def gaussian(like: Tensors, std: float, source: NoiseSource) -> TensorMap:
    """N(0, std^2) for every float of `like` (in sorted node and key order, so the draw does not
    depend on the order a map was built in), in float32 for half precision and in the tensor's
    own dtype otherwise; counts get no noise and are absent from the result."""
    std = _non_negative("noise std", std)
    coordinates = sorted(_coordinates(like), key=lambda c: (c[0], c[1]))
    noise: TensorMap = {}
    for node, key, tensor in coordinates:
        dtype = arithmetic.working_dtype(tensor.dtype)
        draw = source.normal(tuple(tensor.shape)) * std
        noise.setdefault(node, {})[key] = draw.to(dtype)
    return noise


# --- adaptive clipping (Andrew et al. 2021) ----------------------------------------------------


def update_multiplier(multiplier: float, count_std: float) -> float:
    """The noise multiplier the update itself needs, z_D = (z^-2 - (2 sigma_b)^-2)^(-1/2), so
    that the round (the update with z_D, the noisy count of unclipped updates with
    sigma_b) is accounted as one Gaussian mechanism with multiplier z (their Theorem 1; the
    count's sensitivity is 1/2, each client adding its indicator minus 1/2). Needs
    2 sigma_b > z: a count that noisy leaves room in the budget for the update's noise."""
    multiplier = _non_negative("noise multiplier", multiplier)
    count_std = _non_negative("count noise", count_std)
    if multiplier == 0:
        return 0.0
    if 2 * count_std <= multiplier:
        raise PrivacyError(
            f"the count noise {count_std:g} must be more than half the noise multiplier "
            f"{multiplier:g}, or the count alone would spend the whole budget"
        )
    return (multiplier**-2 - (2 * count_std) ** -2) ** -0.5


def next_clip(clip: float, unclipped: float, quantile: float, lr: float) -> float:
    """The geometric update of the clip towards the `quantile` of the update norms:
    C exp(-lr (unclipped - quantile)), `unclipped` being the (noisy) fraction of updates that
    were within C. More within C than the quantile says: C shrinks; fewer: it grows."""
    return _positive("clip", clip) * math.exp(-lr * (unclipped - quantile))


# --- the accountant --------------------------------------------------------------------------


def _dp_accounting() -> Any:
    try:
        import dp_accounting
    except ImportError as error:
        raise PrivacyError(f"the privacy accountant needs dp-accounting: {INSTALL}") from error
    _quiet(logging.getLogger("absl"))
    return dp_accounting


class _FractionalOrders(logging.Filter):
    """dp_accounting's RDP logs a warning for each fractional order below 2 whose series does
    not converge at a small sampling rate (q = 0.1, z near 1), and leaves that order out: the
    epsilon is then a minimum over fewer orders, so still an upper bound. One bisection
    would log hundreds of them; they say nothing about the answer."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("_compute_log_a_frac failed to converge")


def _quiet(logger: logging.Logger) -> None:
    if not any(isinstance(f, _FractionalOrders) for f in logger.filters):
        logger.addFilter(_FractionalOrders())


def epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    rounds: int,
    delta: float,
    *,
    accountant: str = "rdp",
) -> float:
    """The epsilon spent at `delta` by `rounds` rounds, each a Gaussian mechanism with
    `noise_multiplier` on a Poisson sample of clients at `sampling_rate` (expected clients per
    round / clients). 0 for no round, infinite without noise."""
    return epsilon_of([(noise_multiplier, sampling_rate, rounds)], delta, accountant=accountant)


def epsilon_of(
    history: Sequence[Sequence[float]], delta: float, *, accountant: str = "rdp"
) -> float:
    """The epsilon spent at `delta` by a history of stretches (noise multiplier, sampling
    rate, rounds), composed: a run whose noise or participation changed is accounted as it
    ran, not as if it had run its last configuration all along."""
    stretches = tuple(_stretch(s) for s in history)
    delta = float(delta)
    if not 0 < delta < 1:
        raise PrivacyError(f"delta must be in (0, 1), not {delta!r}")
    if accountant not in ACCOUNTANTS:
        known = ", ".join(ACCOUNTANTS)
        raise PrivacyError(f"accountant must be one of {known}, not {accountant!r}")
    return _epsilon(stretches, delta, accountant)


@functools.lru_cache(maxsize=1024)
def _epsilon(stretches: tuple[Stretch, ...], delta: float, accountant: str) -> float:
    stretches = tuple(s for s in stretches if s[2] > 0)
    if not stretches:
        return 0.0
    if any(z == 0 for z, _, _ in stretches):
        return math.inf
    dp = _dp_accounting()
    events = [
        dp.SelfComposedDpEvent(dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(z)), rounds)
        for z, q, rounds in stretches
    ]
    if accountant == "rdp":
        from dp_accounting import rdp

        ledger = rdp.RdpAccountant()
    else:
        from dp_accounting import pld

        ledger = pld.PLDAccountant()
    ledger.compose(dp.ComposedDpEvent(events))
    return float(ledger.get_epsilon(delta))


def exposure(multiplier: float, rounds: int = 1) -> float:
    """What `rounds` Gaussian rounds with noise multiplier z cost one client that took part
    in them, as a number that adds up: rounds / z^2 (infinite without noise). Gaussian
    mechanisms compose exactly into one Gaussian mechanism whose multiplier is
    (sum of z^-2)^(-1/2), so a client's whole history is this one sum."""
    z = _non_negative("noise multiplier", multiplier)
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 0:
        raise PrivacyError(f"rounds must be an integer >= 0, not {rounds!r}")
    if rounds == 0:
        return 0.0
    return math.inf if z == 0 else rounds / z**2


def epsilon_public(spent_exposure: float, delta: float, *, accountant: str = "rdp") -> float:
    """The epsilon at `delta` of a client whose rounds add up to `spent_exposure` (the sum
    of `exposure` over the rounds it took part in), against whoever knows which rounds those
    were: the sample is public (soma draws it from the run's seed and records it), so no
    amplification by sampling: the rounds are Gaussian mechanisms composed, under
    add-or-remove-one adjacency (the sum's sensitivity is the clip C)."""
    total = _real("exposure", spent_exposure)
    if total < 0:
        raise PrivacyError(f"exposure must be >= 0, not {spent_exposure!r}")
    delta = _delta(delta)
    _accountant(accountant)
    if total == 0:
        return 0.0
    if math.isinf(total):
        return math.inf
    return _epsilon_events(("gaussian", total**-0.5), delta, accountant)


def epsilon_fixed_sample(
    noise_multiplier: float, clients: int, sampled: int, rounds: int, delta: float
) -> float:
    """The epsilon at `delta` of `rounds` rounds, each a Gaussian mechanism on a sample of
    exactly `sampled` of `clients` drawn without replacement, against a reader from whom the
    sample is secret. Such a sample is a fixed count, so the adjacency is replace-one (the
    count is public): one client's update replaced by another's moves the sum by up to 2C,
    so the event's multiplier is z / 2 (Wang, Balle and Kasiviswanathan 2019, RDP only)."""
    z = _non_negative("noise multiplier", noise_multiplier)
    clients, sampled = _count("clients", clients), _count("clients sampled", sampled)
    if sampled > clients:
        raise PrivacyError(f"a sample of {sampled} is more than the {clients} clients")
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 0:
        raise PrivacyError(f"rounds must be an integer >= 0, not {rounds!r}")
    delta = _delta(delta)
    if rounds == 0:
        return 0.0
    if z == 0:
        return math.inf
    return _epsilon_events(("fixed", z / 2, clients, sampled, int(rounds)), delta, "rdp")


@functools.lru_cache(maxsize=1024)
def _epsilon_events(event: tuple, delta: float, accountant: str) -> float:
    dp = _dp_accounting()
    if event[0] == "gaussian":
        built, relation = dp.GaussianDpEvent(event[1]), dp.NeighboringRelation.ADD_OR_REMOVE_ONE
    else:
        _, z, clients, sampled, rounds = event
        sample = dp.SampledWithoutReplacementDpEvent(clients, sampled, dp.GaussianDpEvent(z))
        built, relation = dp.SelfComposedDpEvent(sample, rounds), dp.NeighboringRelation.REPLACE_ONE
    if accountant == "rdp":
        from dp_accounting import rdp

        ledger = rdp.RdpAccountant(neighboring_relation=relation)
    else:
        from dp_accounting import pld

        ledger = pld.PLDAccountant()
    ledger.compose(built)
    return float(ledger.get_epsilon(delta))


def _delta(delta: object) -> float:
    value = _real("delta", delta)
    if not 0 < value < 1:
        raise PrivacyError(f"delta must be in (0, 1), not {delta!r}")
    return value


def _accountant(accountant: object) -> None:
    if accountant not in ACCOUNTANTS:
        known = ", ".join(ACCOUNTANTS)
        raise PrivacyError(f"accountant must be one of {known}, not {accountant!r}")


def noise_for_epsilon(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    rounds: int,
    *,
    accountant: str = "rdp",
    tolerance: float = 1e-4,
) -> float:
    """The smallest noise multiplier (to `tolerance`, relative) whose `rounds` rounds at
    `sampling_rate` spend at most `target_epsilon` at `delta`. Epsilon falls as the noise
    grows, so a bisection finds it; the answer is on the safe side (its epsilon <= target)."""
    target = _positive("target epsilon", target_epsilon)
    _count("rounds", rounds)

    def spent(z: float) -> float:
        return epsilon(z, sampling_rate, rounds, delta, accountant=accountant)

    low, high = 0.0, 1.0
    while spent(high) > target:
        low, high = high, high * 2
        if high > 1e6:
            raise PrivacyError(f"no noise multiplier up to 1e6 reaches epsilon {target:g}")
    while high - low > tolerance * high:
        middle = (low + high) / 2
        if spent(middle) > target:
            low = middle
        else:
            high = middle
    return high


STORE_READER, WEIGHTS_READER = "store_reader", "weights_reader"
SECRET_POISSON = "secret_poisson_sample"
# Whom a reported epsilon holds against, by the `against` that `spent` gives it.
ADVERSARIES = {
    STORE_READER: "whoever reads the store or the config (the sample is public: the "
    "worst-placed client's rounds composed, no amplification by sampling)",
    WEIGHTS_READER: "whoever reads only the published weights and the config, not the "
    "clients' releases in the store (central DP's figure: each round's noisy sum)",
    SECRET_POISSON: "only a reader from whom a Poisson sample is secret, not a reader of the "
    "store (a state kept before soma accounted for the public sample)",
}


def spent(state: object) -> dict[str, Any] | None:
    """What a strategy's state says was spent so far, `{"epsilon", "delta", "round",
    "against"}`, `"epsilons"` (each figure the state keeps, by whom it holds against) and
    `"budget"` when the run has one; None for a state that keeps no such account (another
    strategy's, or none). `against` (a key of ADVERSARIES) says whom `epsilon`, the figure
    the budget stops on, holds against. A state kept before the store reader's figure was
    kept apart (each client's `exposure`, no `against`) was accounted at the sum's noise:
    its figure holds against a reader of the published weights only; an older one's
    assumed a secret Poisson sample. For `soma status` and the workflow's summary."""
    if not isinstance(state, Mapping):
        return None
    try:
        found = {
            "epsilon": float(state["epsilon"]),
            "delta": float(state["delta"]),
            "round": int(state["round"]),
        }
    except (KeyError, TypeError, ValueError):
        return None
    against = state.get("against")
    if against in (STORE_READER, WEIGHTS_READER):
        found["against"] = against
        figures = state.get("epsilons")
        if isinstance(figures, Mapping):
            found["epsilons"] = {
                k: float(v)
                for k, v in figures.items()
                if k in ADVERSARIES and isinstance(v, (int, float)) and not isinstance(v, bool)
            }
    else:
        found["against"] = WEIGHTS_READER if "exposure" in state else SECRET_POISSON
    budget = state.get("budget")
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        found["budget"] = float(budget)
    return found


def spent_text(found: Mapping[str, Any]) -> str:
    """What `spent` found, in words: the figure the budget stops on (and the budget), then
    each other figure the state keeps, each with whom it holds against. For `soma status`."""
    budget = f" of a budget of {found['budget']:.4g}" if "budget" in found else ""
    against = found.get("against")
    whom = f", against {ADVERSARIES.get(against, against)}" if against else ""
    text = f"epsilon {found['epsilon']:.4g}{budget} at delta {found['delta']:g}{whom}"
    for reader, figure in (found.get("epsilons") or {}).items():
        if reader != against:
            text += f"; epsilon {figure:.4g} against {ADVERSARIES.get(reader, reader)}"
    return text


# --- arguments -------------------------------------------------------------------------------


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise PrivacyError(f"{name} must be a number, not {value!r}")
    return float(value)


def _positive(name: str, value: object) -> float:
    number = _real(name, value)
    if not (math.isfinite(number) and number > 0):
        raise PrivacyError(f"{name} must be a finite number > 0, not {value!r}")
    return number


def _non_negative(name: str, value: object) -> float:
    number = _real(name, value)
    if not (math.isfinite(number) and number >= 0):
        raise PrivacyError(f"{name} must be a finite number >= 0, not {value!r}")
    return number


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise PrivacyError(f"{name} must be an integer >= 1, not {value!r}")
    return int(value)


def _stretch(stretch: Sequence[float]) -> Stretch:
    try:
        z, q, rounds = stretch
    except (TypeError, ValueError):
        raise PrivacyError(
            f"a stretch of history is (noise multiplier, sampling rate, rounds), not {stretch!r}"
        ) from None
    z = _non_negative("noise multiplier", z)
    q = _real("sampling rate", q)
    if not 0 < q <= 1:
        raise PrivacyError(f"sampling rate must be in (0, 1], not {q!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 0:
        raise PrivacyError(f"rounds must be an integer >= 0, not {rounds!r}")
    return z, q, int(rounds)
